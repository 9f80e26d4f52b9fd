#include "switch/tree.h"

#include <netlink/route/class.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/qdisc/fifo.h>
#include <netlink/route/qdisc/htb.h>
#include <netlink/route/qdisc/tbf.h>
#include <netlink/route/tc.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/log.h"

namespace sluice::sw {

namespace {
std::string hex_handle(uint32_t h) {
  char b[24];
  if (TC_H_MIN(h)) std::snprintf(b, sizeof(b), "%x:%x", TC_H_MAJ(h) >> 16, TC_H_MIN(h));
  else std::snprintf(b, sizeof(b), "%x:", TC_H_MAJ(h) >> 16);
  return b;
}
void nl_check(int rc, const std::string& what) {
  if (rc < 0) throw Error(what + ": " + nl_geterror(rc));
}
}  // namespace

uint32_t PortTree::leaf_limit() const {
  // The root TBF holds the one skb it peeked from HTB outside every
  // leaf's limit: one frame less in the leaf keeps the port's queue at
  // buffer_bytes with MTU frames (with GSO the peeked skb can be a 64 KB
  // super-packet, and the port holds up to that much more).
  return std::max<uint32_t>(spec_.buffer_bytes > 2 * 1514 ? spec_.buffer_bytes - 1514 : spec_.buffer_bytes, 1514);
}

uint32_t PortTree::burst_bytes() const {
  if (spec_.burst_bytes) return std::max<uint32_t>(spec_.burst_bytes, 1600);
  // 100 us at the link rate, at least two MTU frames (the lab's shaper).
  return uint32_t(std::max<uint64_t>(3028, spec_.rate_bps / 8 / 10000));
}

PortTree::PortTree(TreeSpec spec) : spec_(std::move(spec)) {
  if (spec_.queues.empty() || spec_.queues.size() > SLUICE_SW_MAX_QUEUES) throw Error("bad queue count");
  sk_ = nl_socket_alloc();
  if (!sk_) throw Error("netlink socket");
  if (int rc = nl_connect(sk_, NETLINK_ROUTE); rc < 0) {
    nl_socket_free(sk_);
    throw Error(std::string("netlink connect: ") + nl_geterror(rc));
  }
  try {
    // What is there now: ours from a run that died (rebuilt from scratch),
    // or someone's root (replaced, reported).
    nl_cache* cache = nullptr;
    nl_check(rtnl_qdisc_alloc_cache(sk_, &cache), "list qdiscs of " + spec_.ifname);
    if (rtnl_qdisc* old = rtnl_qdisc_get_by_parent(cache, spec_.ifindex, TC_H_ROOT)) {
      const char* kind = rtnl_tc_get_kind(TC_CAST(old));
      uint32_t h = rtnl_tc_get_handle(TC_CAST(old));
      bool ours = h == TC_HANDLE(kTreeMajor, 0) && kind && (std::string(kind) == "tbf" || std::string(kind) == "htb");
      if (ours) {
        SLOG_WARN("SWITCH_TREE_STALE", "{}: removing the queue tree a previous sluiced left ({})", spec_.ifname,
                  hex_handle(h));
        rtnl_qdisc_delete(sk_, old);
      } else if (kind && std::string(kind) != "noqueue") {
        replaced_ = std::string(kind) + " " + hex_handle(h);
      }
      rtnl_qdisc_put(old);
    }
    nl_cache_free(cache);

    // The port's shaper: a TBF at the link rate, as the plain port has.
    rtnl_qdisc* root = rtnl_qdisc_alloc();
    rtnl_tc_set_ifindex(TC_CAST(root), spec_.ifindex);
    rtnl_tc_set_parent(TC_CAST(root), TC_H_ROOT);
    rtnl_tc_set_handle(TC_CAST(root), TC_HANDLE(kTreeMajor, 0));
    rtnl_tc_set_kind(TC_CAST(root), "tbf");
    rtnl_qdisc_tbf_set_limit(root, int(std::min<uint32_t>(spec_.buffer_bytes, INT32_MAX)));
    rtnl_qdisc_tbf_set_rate(root, int(std::min<uint64_t>(spec_.rate_bps / 8, INT32_MAX)), int(burst_bytes()), 0);
    int rc = rtnl_qdisc_add(sk_, root, NLM_F_CREATE | NLM_F_REPLACE);
    rtnl_qdisc_put(root);
    nl_check(rc, "root tbf on " + spec_.ifname);
    built_ = true;
    if (!replaced_.empty())
      SLOG_INFO("SWITCH_TREE_REPLACED", "{}: replaced root qdisc {} (not restored on exit)", spec_.ifname, replaced_);
    if (spec_.root_only) {
      SLOG_INFO("SWITCH_TREE_BUILT", "{}: tbf {} at {} bit/s, limit {} B (queues held by sluiced)", spec_.ifname,
                hex_handle(TC_HANDLE(kTreeMajor, 0)), spec_.rate_bps, spec_.buffer_bytes);
      return;
    }

    // The queues: an HTB under the TBF whose classes never run out of
    // tokens (4x the link), so HTB only schedules (strict priority between
    // levels, DRR by quantum within one) and the TBF above shapes.
    rtnl_qdisc* htb = rtnl_qdisc_alloc();
    rtnl_tc_set_ifindex(TC_CAST(htb), spec_.ifindex);
    rtnl_tc_set_parent(TC_CAST(htb), TC_HANDLE(kTreeMajor, 1));
    rtnl_tc_set_handle(TC_CAST(htb), TC_HANDLE(kHtbMajor, 0));
    rtnl_tc_set_kind(TC_CAST(htb), "htb");
    rtnl_htb_set_defcls(htb, TC_HANDLE(kHtbMajor, kFallbackMinor));
    rtnl_htb_set_rate2quantum(htb, 1);
    rc = rtnl_qdisc_add(sk_, htb, NLM_F_CREATE | NLM_F_EXCL);
    rtnl_qdisc_put(htb);
    nl_check(rc, "htb under the root tbf on " + spec_.ifname);

    const uint64_t fast = spec_.rate_bps * kLeafRateFactor;
    const uint64_t n = spec_.queues.size();
    add_class(TC_HANDLE(kHtbMajor, 0), TC_HANDLE(kHtbMajor, kRootClassMinor), fast, fast, 0);
    for (uint32_t q = 0; q < n; ++q) {
      add_class(TC_HANDLE(kHtbMajor, kRootClassMinor), TC_HANDLE(kHtbMajor, q + 1), fast, fast,
                std::min<uint32_t>(spec_.queues[q].priority, 7));
      nl_check(add_tbf(q, false, true), spec_.ifname + " queue " + std::to_string(q) + " tbf leaf");
    }
    add_class(TC_HANDLE(kHtbMajor, kRootClassMinor), TC_HANDLE(kHtbMajor, kFallbackMinor), fast, fast, 0);
    rtnl_qdisc* fb = rtnl_qdisc_alloc();
    rtnl_tc_set_ifindex(TC_CAST(fb), spec_.ifindex);
    rtnl_tc_set_parent(TC_CAST(fb), TC_HANDLE(kHtbMajor, kFallbackMinor));
    rtnl_tc_set_handle(TC_CAST(fb), TC_HANDLE(kLeafMajorBase + kFallbackMinor % 0x100, 0));
    rtnl_tc_set_kind(TC_CAST(fb), "bfifo");
    rtnl_qdisc_fifo_set_limit(fb, int(std::min<uint32_t>(spec_.buffer_bytes, INT32_MAX)));
    rc = rtnl_qdisc_add(sk_, fb, NLM_F_CREATE | NLM_F_EXCL);
    rtnl_qdisc_put(fb);
    nl_check(rc, spec_.ifname + " fallback bfifo");
  } catch (...) {
    remove();
    nl_socket_free(sk_);
    sk_ = nullptr;
    throw;
  }
  SLOG_INFO("SWITCH_TREE_BUILT", "{}: tbf {} at {} bit/s over htb {} with {} queue(s), {} B per queue", spec_.ifname,
            hex_handle(TC_HANDLE(kTreeMajor, 0)), spec_.rate_bps, hex_handle(TC_HANDLE(kHtbMajor, 0)),
            spec_.queues.size(), spec_.buffer_bytes);
}

PortTree::~PortTree() {
  remove();
  if (sk_) nl_socket_free(sk_);
}

void PortTree::add_class(uint32_t parent, uint32_t handle, uint64_t rate, uint64_t ceil, uint32_t prio) {
  rtnl_class* c = rtnl_class_alloc();
  rtnl_tc_set_ifindex(TC_CAST(c), spec_.ifindex);
  rtnl_tc_set_parent(TC_CAST(c), parent);
  rtnl_tc_set_handle(TC_CAST(c), handle);
  rtnl_tc_set_kind(TC_CAST(c), "htb");
  rtnl_htb_set_rate(c, uint32_t(std::min<uint64_t>(rate / 8, UINT32_MAX)));
  rtnl_htb_set_ceil(c, uint32_t(std::min<uint64_t>(ceil / 8, UINT32_MAX)));
  rtnl_htb_set_rbuffer(c, burst_bytes());
  rtnl_htb_set_cbuffer(c, burst_bytes());
  rtnl_htb_set_quantum(c, 1514);
  rtnl_htb_set_prio(c, prio);
  int rc = rtnl_class_add(sk_, c, NLM_F_CREATE | NLM_F_EXCL);
  rtnl_class_put(c);
  nl_check(rc, spec_.ifname + " class " + hex_handle(handle));
}

int PortTree::add_tbf(uint32_t q, bool paused, bool create, uint32_t bucket) {
  rtnl_qdisc* t = rtnl_qdisc_alloc();
  rtnl_tc_set_ifindex(TC_CAST(t), spec_.ifindex);
  rtnl_tc_set_parent(TC_CAST(t), TC_HANDLE(kHtbMajor, q + 1));
  rtnl_tc_set_handle(TC_CAST(t), TC_HANDLE(kLeafMajorBase + q + 1, 0));
  rtnl_tc_set_kind(TC_CAST(t), "tbf");
  rtnl_qdisc_tbf_set_limit(t, int(std::min<uint32_t>(leaf_limit(), INT32_MAX)));
  // Paused: one frame's bucket (kPausedBucketBytes: what the change lets
  // out at once). Unpaused, the leaf never throttles (4x the link; the
  // root TBF shapes), with the port's burst.
  uint64_t rate = paused ? kPausedRateBytes : spec_.rate_bps / 8 * kLeafRateFactor;
  if (!bucket) bucket = paused ? kPausedBucketBytes : burst_bytes();
  rtnl_qdisc_tbf_set_rate(t, int(std::min<uint64_t>(rate, INT32_MAX)), int(bucket), 0);
  int rc = rtnl_qdisc_add(sk_, t, create ? NLM_F_CREATE | NLM_F_EXCL : 0);
  rtnl_qdisc_put(t);
  return rc;
}

int PortTree::set_paused(uint32_t q, bool paused) {
  if (!built_ || spec_.root_only || q >= spec_.queues.size()) return -NLE_RANGE;
  return add_tbf(q, paused, false);
}

int PortTree::release(uint32_t q, uint64_t bytes) {
  if (!built_ || spec_.root_only || q >= spec_.queues.size()) return -NLE_RANGE;
  // The bucket must hold the largest frame the leaf may get, or TBF drops it.
  uint64_t b = std::clamp<uint64_t>(bytes, kMinReleaseBytes, spec_.buffer_bytes);
  return add_tbf(q, true, false, uint32_t(b));
}

std::vector<ClassCounters> PortTree::read() const {
  std::vector<ClassCounters> out(spec_.queues.size() + 1);
  nl_cache* cache = nullptr;
  if (!built_ || spec_.root_only || rtnl_class_alloc_cache(sk_, spec_.ifindex, &cache) < 0) return {};
  for (nl_object* o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
    auto* tc = TC_CAST(o);
    uint32_t h = rtnl_tc_get_handle(tc);
    if (TC_H_MAJ(h) != TC_HANDLE(kHtbMajor, 0)) continue;
    uint32_t m = TC_H_MIN(h);
    size_t i;
    if (m == kFallbackMinor) i = spec_.queues.size();
    else if (m >= 1 && m <= spec_.queues.size()) i = m - 1;
    else continue;
    out[i] = {rtnl_tc_get_stat(tc, RTNL_TC_PACKETS), rtnl_tc_get_stat(tc, RTNL_TC_BYTES),
              rtnl_tc_get_stat(tc, RTNL_TC_DROPS), uint32_t(rtnl_tc_get_stat(tc, RTNL_TC_QLEN)),
              uint32_t(rtnl_tc_get_stat(tc, RTNL_TC_BACKLOG))};
  }
  nl_cache_free(cache);
  return out;
}

void PortTree::remove() noexcept {
  if (!built_ || !sk_) return;
  built_ = false;
  // Delete the root only if it is still ours (someone may have replaced it).
  nl_cache* cache = nullptr;
  if (rtnl_qdisc_alloc_cache(sk_, &cache) < 0) return;
  if (rtnl_qdisc* root = rtnl_qdisc_get_by_parent(cache, spec_.ifindex, TC_H_ROOT)) {
    const char* kind = rtnl_tc_get_kind(TC_CAST(root));
    if (rtnl_tc_get_handle(TC_CAST(root)) == TC_HANDLE(kTreeMajor, 0) && kind && std::string(kind) == "tbf") {
      int rc = rtnl_qdisc_delete(sk_, root);
      if (rc < 0)
        SLOG_WARN("SWITCH_TREE_REMOVE_FAILED", "{}: deleting tbf 51: failed: {}", spec_.ifname, nl_geterror(rc));
      else
        SLOG_INFO("SWITCH_TREE_REMOVED", "{}: removed the queue tree (51: and its {} classes and leaves)", spec_.ifname,
                  spec_.root_only ? 0 : 2 * spec_.queues.size() + 4);
    } else {
      SLOG_WARN("SWITCH_TREE_GONE", "{}: the root qdisc is no longer sluice's; left alone", spec_.ifname);
    }
    rtnl_qdisc_put(root);
  }
  nl_cache_free(cache);
}

std::vector<std::string> PortTree::handles() const {
  if (spec_.root_only) return {hex_handle(TC_HANDLE(kTreeMajor, 0))};
  std::vector<std::string> h = {hex_handle(TC_HANDLE(kTreeMajor, 0)), hex_handle(TC_HANDLE(kHtbMajor, 0)),
                                hex_handle(TC_HANDLE(kHtbMajor, kRootClassMinor))};
  for (uint32_t q = 0; q < spec_.queues.size(); ++q) {
    h.push_back(hex_handle(TC_HANDLE(kHtbMajor, q + 1)));
    h.push_back(hex_handle(TC_HANDLE(kLeafMajorBase + q + 1, 0)));
  }
  h.push_back(hex_handle(TC_HANDLE(kHtbMajor, kFallbackMinor)));
  h.push_back(hex_handle(TC_HANDLE(kLeafMajorBase + kFallbackMinor % 0x100, 0)));
  return h;
}

}  // namespace sluice::sw
