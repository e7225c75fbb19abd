// plan_feed_internal.h: what plan_feed.cc (the feed) shares with fed_plan.cc (its reader).
#ifndef DISTSAMPLER_NODE_PLAN_FEED_INTERNAL_H_
#define DISTSAMPLER_NODE_PLAN_FEED_INTERNAL_H_

namespace distsampler {
namespace detail {

// One more step a reader planned itself because the feed did not hold it (plan_feed_counts).
void count_feed_fallback();

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_NODE_PLAN_FEED_INTERNAL_H_
