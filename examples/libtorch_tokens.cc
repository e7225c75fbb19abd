// libtorch_tokens: a token stream (libtorch/tokens.h) feeding a small language model in libtorch,
// C++ only: torch::data's DataLoader over distsampler::libtorch::TokenStream, the loss masked
// by the batch's loss_mask. --out writes every batch (for tests/dist/libtorch_tokens.py, which
// compares them with the Python stream's); --resume-at K saves the stream's state after K steps,
// makes a new stream and loads it, as a job resumed from a checkpoint does.
//
//   libtorch_tokens --source data/web_0,data/web_1=3 --source data/code=1 --seq-len 63
//       --global-batch 12 --world-size 2 --rank 0 --micro-batch 2 --steps 20 --train
#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli_flags.h"
#include "distsampler/libtorch/tokens.h"

namespace {

// A source flag, "PREFIX[,PREFIX...]=WEIGHT".
std::pair<std::vector<std::string>, double> parse_source(const std::string& flag) {
  const size_t eq = flag.rfind('=');
  if (eq == std::string::npos || eq == 0) {
    throw std::invalid_argument("--source = '" + flag + "'; allowed: PREFIX[,PREFIX...]=WEIGHT");
  }
  std::vector<std::string> shards;
  for (size_t at = 0; at <= eq;) {
    const size_t comma = std::min(flag.find(',', at), eq);
    shards.push_back(flag.substr(at, comma - at));
    at = comma + 1;
  }
  size_t used = 0;
  const double weight = std::stod(flag.substr(eq + 1), &used);
  if (used != flag.size() - eq - 1) {
    throw std::invalid_argument("--source = '" + flag + "': the weight is not a number");
  }
  return {shards, weight};
}

template <typename T>
void write(std::ofstream& out, const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  out.write(reinterpret_cast<const char*>(c.data_ptr<T>()),
            static_cast<std::streamsize>(c.numel() * sizeof(T)));
}

// A tiny language model: embedding, one hidden layer, the vocabulary's logits.
struct TinyLm : torch::nn::Module {
  explicit TinyLm(int64_t vocabulary)
      : embed(register_module("embed", torch::nn::Embedding(vocabulary, 32))),
        hidden(register_module("hidden", torch::nn::Linear(32, 32))),
        out(register_module("out", torch::nn::Linear(32, vocabulary))) {}
  torch::Tensor forward(const torch::Tensor& tokens) {
    return out(torch::tanh(hidden(embed(tokens))));
  }
  torch::nn::Embedding embed;
  torch::nn::Linear hidden, out;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A token stream feeding a small language model in libtorch (libtorch/tokens.h)"};
  std::vector<std::string> sources;
  distsampler::libtorch::TokenStreamConfig config;
  config.plan.seq_len = 63;
  config.plan.global_batch = 12;
  std::string packing = "concat", out_path;
  uint64_t steps = 10, resume_at = 0, vocabulary = 50000;
  int64_t eod = -1;
  bool train = false;
  app.add_option("--source", sources, "PREFIX[,PREFIX...]=WEIGHT, per source")->required();
  app.add_option("--seq-len", config.plan.seq_len, "tokens a row's input")
      ->check(examples::kDecimal & examples::kAtLeastOne);
  app.add_option("--global-batch", config.plan.global_batch, "sequences a step")
      ->check(examples::kDecimal & examples::kAtLeastOne);
  app.add_option("--seed", config.plan.seed, "the plan's seed")->check(examples::kDecimal);
  app.add_option("--packing", packing, "concat or best_fit");
  app.add_option("--world-size", config.world_size, "ranks")
      ->check(examples::kDecimal & examples::kAtLeastOne);
  app.add_option("--rank", config.rank, "this rank")->check(examples::kDecimal);
  app.add_option("--micro-batch", config.micro_batch, "rows a batch (0: the rank's step)")
      ->check(examples::kDecimal);
  app.add_flag("--mask-cross-document", config.mask_cross_document,
               "mask a label of another document than its input");
  app.add_option("--eod-token", eod, "the end-of-document token; with --eod-mask-loss masked");
  app.add_flag("--eod-mask-loss", config.eod_mask_loss, "mask the label after each EOD");
  app.add_option("--steps", steps, "steps to read")->check(examples::kDecimal);
  app.add_option("--resume-at", resume_at,
                 "after this many steps, a new stream loads the state (0: never)")
      ->check(examples::kDecimal);
  app.add_option("--out", out_path, "write every batch here (raw, for the test)");
  app.add_flag("--train", train, "train the model on the batches (else read them only)");
  app.add_option("--vocabulary", vocabulary, "the model's vocabulary (token ids below it)")
      ->check(examples::kDecimal & examples::kAtLeastOne);
  CLI11_PARSE(app, argc, argv);
  try {
    for (const std::string& flag : sources) {
      auto [shards, weight] = parse_source(flag);
      config.sources.push_back(std::move(shards));
      config.plan.weights.push_back(weight);
    }
    config.plan.packing = distsampler::parse_packing(packing, "--packing");
    if (eod >= 0) config.eod = distsampler::parse_eod_token(std::to_string(eod), false,
                                                             "--eod-token");
    distsampler::libtorch::TokenStream stream(config);
    const distsampler::RankSequences share = distsampler::rank_sequences(
        config.plan.global_batch, config.world_size, config.rank, 0);
    const uint64_t micro = stream.micro_batch();
    const uint64_t per_step = share.count / micro;
    std::ofstream out;
    if (!out_path.empty()) out.open(out_path, std::ios::binary);
    TinyLm model(static_cast<int64_t>(vocabulary));
    torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1));
    const auto record = [&](const distsampler::libtorch::TokenBatch& batch) {
      if (!out.is_open()) return;
      const int64_t step = batch.step;
      out.write(reinterpret_cast<const char*>(&step), sizeof step);
      write<int64_t>(out, batch.tokens);
      write<int64_t>(out, batch.labels);
      write<float>(out, batch.loss_mask);
      write<int64_t>(out, batch.position_ids);
      write<int32_t>(out, batch.segment_ids);
      write<int64_t>(out, batch.sequence);
    };
    const auto read = [&](const distsampler::libtorch::TokenStream& from, uint64_t count) {
      // torch::data's DataLoader over the stream (a copy: a handle to it), `count` steps.
      auto loader = torch::data::make_data_loader(
          from, torch::data::samplers::StreamSampler(count * per_step * micro),
          torch::data::DataLoaderOptions().batch_size(micro));
      uint64_t batches = 0;
      for (auto& batch : *loader) {
        record(batch);
        if (train) {
          optimizer.zero_grad();
          const torch::Tensor logits = model.forward(batch.tokens);
          const torch::Tensor each = torch::nn::functional::cross_entropy(
              logits.reshape({-1, logits.size(-1)}), batch.labels.reshape({-1}),
              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
          const torch::Tensor mask = batch.loss_mask.reshape({-1});
          const torch::Tensor loss = (each * mask).sum() / mask.sum().clamp_min(1);
          loss.backward();
          optimizer.step();
          if (++batches % per_step == 0) {
            std::cout << "step " << batch.step << " loss " << loss.item<double>() << "\n";
          }
        }
      }
    };
    // --resume-at: the first steps from another stream, whose state this one loads (a
    // checkpoint's round trip).
    if (resume_at > 0 && resume_at < steps) {
      distsampler::libtorch::TokenStream first(config);
      for (uint64_t i = 0; i < resume_at * per_step; ++i) {
        record(first.next());
      }
      const distsampler::DictValue state = first.state_dict();
      stream.load_state_dict(state);
      std::cout << "resumed at step " << stream.step() << "\n";
      read(stream, steps - resume_at);
    } else {
      read(stream, steps);
    }
    std::cout << "read " << steps << " steps of " << per_step << " batches of " << micro
              << " rows\n";
  } catch (const std::exception& e) {
    std::cerr << "libtorch_tokens: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
