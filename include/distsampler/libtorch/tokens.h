// libtorch/tokens.h: a token stream as a libtorch torch::data stream dataset, C++ only.
//
// The runtime Python's distsampler.tokens.TokenStream drives (tokens/stream.h): the plan over
// Megatron .bin/.idx sources (local, s3://, https://), a rank's share of each step read a step
// at a time (the next one on a thread meanwhile, planned ahead by a feed of this process), cut
// into micro-batches. Each batch holds what the Python stream's holds, tensor for tensor: tokens
// and labels (int64 [m, seq_len], labels one token on), loss_mask (float [m, seq_len], the one
// rule of loader/tokens.h's token_loss_mask), position_ids, segment_ids, sequence (the global
// sequence indices) and step. tests/dist/libtorch_tokens.py checks it against the Python stream.
//
//   distsampler::libtorch::TokenStreamConfig config;
//   config.sources = {{"data/web_0", "data/web_1"}, {"data/code"}};
//   config.plan.weights = {3.0, 1.0};
//   config.plan.seq_len = 4096;
//   config.plan.global_batch = 512;
//   config.world_size = world_size;
//   config.rank = rank;
//   config.micro_batch = 4;
//   distsampler::libtorch::TokenStream stream(config);
//   auto loader = torch::data::make_data_loader(
//       std::move(stream), torch::data::samplers::StreamSampler(steps * rows_per_step),
//       torch::data::DataLoaderOptions().batch_size(config.micro_batch));
//   for (auto& batch : *loader) model.step(batch.tokens, batch.labels, batch.loss_mask);
//
// Or without a DataLoader: stream.next(). The batch size the loader asks must be micro_batch
// (the plan fixes the rows of a step); with workers = 0 (the default: batches in the stream's
// order; the read-ahead already overlaps the next step's reads with training). state_dict() between steps: the Python stream's state
// (TokenPlan's), so a C++ job resumes a Python one's checkpoint and the other way round.
//
// Header-only; link the CMake target distsampler::libtorch (distsampler plus libtorch).
#ifndef DISTSAMPLER_LIBTORCH_TOKENS_H_
#define DISTSAMPLER_LIBTORCH_TOKENS_H_

#include <torch/data/datasets/base.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/loader/tokens.h"
#include "distsampler/state_dict.h"
#include "distsampler/tokens/plan.h"
#include "distsampler/tokens/stream.h"

namespace distsampler::libtorch {

// One micro-batch of a rank's step.
struct TokenBatch {
  torch::Tensor tokens, labels, loss_mask, position_ids, segment_ids, sequence;
  int64_t step = 0;
};

struct TokenStreamConfig {
  std::vector<std::vector<std::string>> sources;  // per source, its shard prefixes
  // weights, seq_len, global_batch, seed, packing, window, split, subset, orders (tokens/plan.h)
  TokenPlanOptions plan;
  std::vector<TokenEdit> edits;  // loader/tokens.h's (parse_token_edit: the CLI's flags)
  uint64_t world_size = 1, rank = 0;
  uint64_t micro_batch = 0;  // rows a batch; 0: the rank's share of a step
  int64_t pad_token = 0;
  TokenPositions positions = TokenPositions::kSegment;
  bool mask_cross_document = false;
  std::optional<EodToken> eod;  // parse_eod_token's
  bool eod_mask_loss = false;
  uint64_t plan_ahead = 16;  // steps a feed of this process plans ahead; 0: none
};

// Copies are handles to one stream (torch::data's DataLoader copies its dataset), so the
// caller's handle sees the loader's progress; calls are serialized on the stream's lock.
class TokenStream : public torch::data::datasets::StreamDataset<TokenStream, TokenBatch> {
 public:
  // Throws std::invalid_argument naming the parameter for a bad configuration (what the plan
  // and open_token_run throw, and micro_batch not dividing the rank's share), std::runtime_error
  // for a source that cannot be read.
  explicit TokenStream(TokenStreamConfig config) : s_(std::make_shared<State>()) {
    s_->config = std::move(config);
    TokenStreamConfig& c = s_->config;
    s_->runtime = std::make_unique<TokenStreamRuntime>(c.sources, c.plan, c.edits, c.eod);
    const RankSequences share = rank_sequences(c.plan.global_batch, c.world_size, c.rank, 0);
    if (c.micro_batch == 0) c.micro_batch = share.count;
    if (share.count % c.micro_batch != 0) {
      throw std::invalid_argument("micro_batch = " + std::to_string(c.micro_batch) +
                                  "; allowed: a divisor of global_batch / world_size = " +
                                  std::to_string(share.count));
    }
    if (c.eod_mask_loss && !c.eod) {
      throw std::invalid_argument("eod_mask_loss = true needs eod, the token that ends each "
                                  "document");
    }
    s_->rule.mask_cross_document = c.mask_cross_document;
    if (c.eod_mask_loss) s_->rule.eod_mask = c.eod->id;
    if (c.plan_ahead > 0) s_->runtime->start_feed(c.plan_ahead, std::nullopt, c.world_size, c.rank);
  }

  // The next micro-batch.
  TokenBatch next() {
    std::lock_guard<std::mutex> hold(s_->lock);
    State& s = *s_;
    const TokenStreamConfig& c = s.config;
    if (!s.step || s.next_row == s.step->rows.rows) {
      s.step = s.runtime->read_step(c.world_size, c.rank, c.pad_token, c.positions, std::nullopt,
                                    /*read_ahead=*/true, std::nullopt);
      s.next_row = 0;
    }
    const TokenRows& rows = s.step->rows;
    const uint64_t m = c.micro_batch, width = rows.width;
    const auto first = static_cast<int64_t>(s.next_row);
    const auto rows_m = static_cast<int64_t>(m);
    const auto w = static_cast<int64_t>(width);
    const auto long_rows = [&](const int64_t* data) {
      return torch::from_blob(const_cast<int64_t*>(data) + first * w, {rows_m, w}, torch::kInt64)
          .clone();
    };
    torch::Tensor tokens = long_rows(rows.tokens.data());
    torch::Tensor places = long_rows(rows.positions.data());
    torch::Tensor spans =
        torch::from_blob(const_cast<int32_t*>(rows.segments.data()) + first * w, {rows_m, w},
                         torch::kInt32)
            .clone();
    torch::Tensor mask = torch::empty({rows_m, w - 1}, torch::kFloat32);
    token_loss_mask(tokens.data_ptr<int64_t>(), spans.data_ptr<int32_t>(), m, width, s.rule,
                    mask.data_ptr<float>());
    torch::Tensor sequence = torch::empty({rows_m}, torch::kInt64);
    int64_t* numbers = sequence.data_ptr<int64_t>();
    for (uint64_t i = 0; i < m; ++i) {
      numbers[i] = static_cast<int64_t>(s.step->sequences[s.next_row + i]);
    }
    s.next_row += m;
    TokenBatch batch;
    batch.tokens = tokens.narrow(1, 0, w - 1);
    batch.labels = tokens.narrow(1, 1, w - 1);
    batch.loss_mask = mask;
    batch.position_ids = places.narrow(1, 0, w - 1);
    batch.segment_ids = spans.narrow(1, 0, w - 1);
    batch.sequence = sequence;
    batch.step = static_cast<int64_t>(s.step->step);
    return batch;
  }

  TokenBatch get_batch(size_t batch_size) override {
    if (batch_size != s_->config.micro_batch) {
      throw std::invalid_argument("batch_size = " + std::to_string(batch_size) +
                                  "; allowed: the stream's micro_batch = " +
                                  std::to_string(s_->config.micro_batch));
    }
    return next();
  }
  torch::optional<size_t> size() const override { return torch::nullopt; }

  uint64_t micro_batch() const { return s_->config.micro_batch; }
  // The next step to read.
  uint64_t step() const {
    std::lock_guard<std::mutex> hold(s_->lock);
    return s_->runtime->step();
  }
  // The stream's state between steps (TokenPlan's state_dict, the Python stream's). Throws
  // std::logic_error inside a step (some of its micro-batches read, not all).
  DictValue state_dict() {
    std::lock_guard<std::mutex> hold(s_->lock);
    if (s_->step && s_->next_row != s_->step->rows.rows) {
      throw std::logic_error("state_dict() inside step " + std::to_string(s_->step->step) +
                             ": read the step's other micro-batches first");
    }
    return s_->runtime->state_dict(s_->config.world_size);
  }
  // What TokenStreamRuntime::load_state_dict throws for a state of another run; a failed load
  // leaves the stream as it was.
  void load_state_dict(const DictValue& state) {
    std::lock_guard<std::mutex> hold(s_->lock);
    State& s = *s_;
    s.runtime->load_state_dict(state);
    s.step.reset();
    s.next_row = 0;
    const TokenStreamConfig& c = s.config;
    if (c.plan_ahead > 0) s.runtime->start_feed(c.plan_ahead, std::nullopt, c.world_size, c.rank);
  }

 private:
  struct State {
    mutable std::mutex lock;
    TokenStreamConfig config;
    std::unique_ptr<TokenStreamRuntime> runtime;
    LossMaskRule rule;
    std::optional<StreamStep> step;  // the step being read
    uint64_t next_row = 0;           // its first row not yet in a batch
  };
  std::shared_ptr<State> s_;
};

}  // namespace distsampler::libtorch

#endif  // DISTSAMPLER_LIBTORCH_TOKENS_H_
