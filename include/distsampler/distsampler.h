// distsampler.h: the whole public API in one include.
#ifndef DISTSAMPLER_DISTSAMPLER_H_
#define DISTSAMPLER_DISTSAMPLER_H_

#include "distsampler/feistel.h"
#include "distsampler/fingerprint.h"
#include "distsampler/hash.h"
#include "distsampler/order.h"
#include "distsampler/partition.h"
#include "distsampler/pass.h"
#include "distsampler/policies/batches.h"
#include "distsampler/policies/blend.h"
#include "distsampler/policies/shards.h"
#include "distsampler/policies/weighted.h"
#include "distsampler/policies/wrap.h"
#include "distsampler/sampler.h"
#include "distsampler/seed.h"
#include "distsampler/state.h"
#include "distsampler/torch_random.h"
#include "distsampler/variants.h"
#include "distsampler/version.h"

#endif  // DISTSAMPLER_DISTSAMPLER_H_
