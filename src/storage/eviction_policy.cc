#include "storage/eviction_policy.h"

#include "storage/belady_policy.h"
#include "storage/hot_prefix_policy.h"
#include "storage/lfu_policy.h"
#include "storage/lru_policy.h"
#include "storage/token_policies.h"

namespace weir::storage {

std::vector<std::string> EvictionPolicyNames() {
  return {"lru", "lfu", "belady", "atu", "window", "mru", "hot"};
}

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                           PolicyOptions options) {
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(new LruPolicy());
  if (name == "mru") return std::unique_ptr<EvictionPolicy>(new LruPolicy(/*most_recent=*/true));
  if (name == "hot") {
    return std::unique_ptr<EvictionPolicy>(new HotPrefixPolicy(options.read_ahead_partition));
  }
  if (name == "lfu") return std::unique_ptr<EvictionPolicy>(new LfuPolicy());
  if (name == "atu") return std::unique_ptr<EvictionPolicy>(new AtuPolicy());
  if (name == "window") {
    if (options.window_tokens == 0) {
      return Status::InvalidArgument("policy 'window': window_tokens must be at least 1");
    }
    return std::unique_ptr<EvictionPolicy>(new WindowPolicy(options.window_tokens));
  }
  if (name == "belady") {
    if (options.belady_trace.empty()) {
      return Status::InvalidArgument(
          "policy 'belady' is an offline oracle: it needs the access trace of a previous run "
          "(WeightCache::TakeTrace with CacheOptions::record_trace)");
    }
    return std::unique_ptr<EvictionPolicy>(new BeladyPolicy(std::move(options.belady_trace)));
  }
  std::string known;
  for (const std::string& n : EvictionPolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument(StrFormat("unknown eviction policy '%.*s' (known: %s)",
                                           static_cast<int>(name.size()), name.data(),
                                           known.c_str()));
}

}  // namespace weir::storage
