#include "model/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace weir::model {

Result<PerplexityResult> Perplexity(Session& session, std::span<const int32_t> tokens, int32_t bos_id,
                                    const PerplexityOptions& options,
                                    const std::function<void(int, int)>& progress) {
  const int ctx = session.ctx();
  const int vocab = session.model().config().vocab_size;
  if (ctx < 4) return Status::InvalidArgument(StrFormat("context size %d too small for perplexity", ctx));
  int n_chunks = static_cast<int>(tokens.size() / static_cast<size_t>(ctx));
  if (n_chunks == 0) {
    return Status::InvalidArgument(StrFormat("the text has %zu tokens, fewer than one chunk of %d; use a smaller -c",
                                             tokens.size(), ctx));
  }
  if (options.max_chunks > 0) n_chunks = std::min(n_chunks, options.max_chunks);
  const int first = options.score == PerplexityOptions::Score::kAll ? 0 : ctx / 2;

  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  double sum = 0, sum_sq = 0;
  int64_t count = 0;
  for (int c = 0; c < n_chunks; ++c) {
    std::copy_n(tokens.begin() + static_cast<ptrdiff_t>(c) * ctx, ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    session.Reset();
    for (int start = 0; start < ctx; start += session.n_batch()) {
      int n = std::min(session.n_batch(), ctx - start);
      WEIR_ASSIGN_OR_RETURN(const float* logits,
                            session.Forward(std::span<const int32_t>(chunk).subspan(static_cast<size_t>(start), static_cast<size_t>(n)),
                                            LogitsFor::kAll));
      // Position p predicts chunk[p + 1]; score p in [first, ctx - 2].
      for (int i = 0; i < n; ++i) {
        int p = start + i;
        if (p < first || p > ctx - 2) continue;
        const float* row = logits + static_cast<size_t>(i) * vocab;
        float mx = *std::max_element(row, row + vocab);
        double z = 0;
        for (int v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v] - mx));
        double nll = std::log(z) + mx - row[chunk[static_cast<size_t>(p) + 1]];
        if (options.argmax != nullptr) {
          options.argmax->push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
        }
        sum += nll;
        sum_sq += nll * nll;
        ++count;
      }
    }
    if (progress) progress(c + 1, n_chunks);
  }
  PerplexityResult r;
  r.chunks = n_chunks;
  r.tokens_scored = count;
  r.mean_nll = sum / static_cast<double>(count);
  r.ppl = std::exp(r.mean_nll);
  if (count > 1) {
    double var = std::max(0.0, sum_sq / count - r.mean_nll * r.mean_nll);
    r.ppl_stderr = r.ppl * std::sqrt(var / static_cast<double>(count - 1));
  }
  return r;
}

}  // namespace weir::model
