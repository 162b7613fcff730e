// HotPrefixPolicy ("hot"): a static priority by position. Within each cached extent a unit's
// rank is its index (UnitIndex); the lower, the hotter. A unit is admitted only into free room or
// in place of a colder one, and the coldest resident unit is the victim. So each partition fills
// with the leading units of its extents that have been used and keeps them.
//
// Why: a column pack written with an activation order (`weir pack --layout columns --calib`)
// stores each layer group's input channels and neurons hottest first, by how often calibration
// text kept them. The leading blocks are then the columns DIP keeps most often: a hot set pinned
// from calibration (PowerInfer-2's hot region), which DIP-CA's cache-aware masking then prefers.
// On a pack without an order the prefix is just the first channels: every extent keeps its
// leading blocks, so a cache smaller than a token's sweep holds a share of every layer, and each
// layer reads only its tail, in one run (MRU, in one shared pool, keeps the first layers whole).
//
// A partition that reads ahead land in (PolicyOptions::read_ahead_partition, the streaming
// engine's staging) is ordered by release instead, the last released first: by rank, a block
// read ahead for the next layer would be dropped to keep one of low index that was just used
// and is needed again only next token (the 1.1B at 296 MiB: 380 -> 376 MB read a token with
// dense bundles, 184 -> 181 in span mode).
//
// Thread safety: none; driven under the WeightCache mutex.
#pragma once

#include "storage/ordered_policy.h"

namespace weir::storage {

class HotPrefixPolicy : public OrderedPolicy {
 public:
  explicit HotPrefixPolicy(int64_t read_ahead_partition = -1)
      : read_ahead_partition_(read_ahead_partition) {}
  std::string_view name() const override { return "hot"; }
  void OnAccess(UnitId id, PolicyHook* resident) override { (void)id, (void)resident; }
  void OnInsert(PolicyHook* hook) override;
  void MakeEvictable(PolicyHook* hook) override;
  bool Admit(const PolicyHook& incoming, const PolicyHook& victim) const override;

 private:
  bool read_ahead(const PolicyHook& hook) const {
    return read_ahead_partition_ >= 0 && hook.partition == read_ahead_partition_;
  }
  int64_t read_ahead_partition_;
  uint64_t releases_ = 0;  // read-ahead partition: release order
};

}  // namespace weir::storage
