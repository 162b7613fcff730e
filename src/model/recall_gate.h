// RecallGate: whether predicted experts are worth reading ahead, from how often the predictions
// have been right.
//
// A read-ahead that is right moves a read the layer needs anyway off its critical path; one that
// is wrong adds a whole expert of reading, and when the reads are the bottleneck (an expert is
// megabytes, the products are short) that costs more than the overlap wins. The gate keeps a
// running recall (the share of the chosen experts that were predicted, an exponential average
// over decode steps) and opens while it is at or above a threshold. The recall is observed on
// every step whether or not the prediction was read, so the gate opens again when it pays.
//
// It starts below the threshold (prior 0.5): nothing is read ahead before the predictions have
// shown they are right. Starting optimistic (1.0) read the first tokens' mispredictions: Mixtral
// small at 25 % of its pack, 16 tokens from a cold cache, recall 0.53, read 793-805 MB a token;
// starting at 0.5, 773 MB (docs/moe.md, "Staging held one expert of two").
#pragma once

#include <cstdint>

namespace weir::model {

class RecallGate {
 public:
  // threshold: the recall the gate opens at; decay: the running recall's weight on the past
  // (0 <= decay < 1); prior: the recall before any observation.
  explicit RecallGate(double threshold = 0.75, double decay = 0.9, double prior = 0.5)
      : threshold_(threshold), decay_(decay), recall_(prior) {}

  // One decode step's prediction met the choice: `used` of the `chosen` experts were predicted.
  // A step with nothing chosen changes nothing.
  void Observe(uint64_t used, uint64_t chosen) {
    if (chosen == 0) return;
    const uint64_t hit = used > chosen ? chosen : used;
    recall_ = decay_ * recall_ +
              (1.0 - decay_) * static_cast<double>(hit) / static_cast<double>(chosen);
  }

  bool open() const { return recall_ >= threshold_; }
  double recall() const { return recall_; }

 private:
  double threshold_;
  double decay_;
  double recall_;
};

}  // namespace weir::model
