// The tc hook priorities of the mechanisms table (MechanismInfo::tc): each
// mechanism declares its own in its folder, and no two share one, so two
// mechanisms on one interface never replace each other's filter (a filter is
// identified by handle and priority, core/tc.h).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/tc.h"
#include "mechanisms/mechanisms.h"

namespace sluice {
namespace {

TEST(TcPriorities, NoTwoMechanismsShareOne) {
  std::map<uint32_t, std::string> owner;  // prio -> "mechanism (programs)"
  size_t slots = 0;
  for (const MechanismInfo& m : mechanisms()) {
    for (const TcSlot& s : m.tc) {
      ++slots;
      std::string who = m.name + " (" + s.programs + ")";
      EXPECT_GT(s.prio, 0u) << who;
      EXPECT_LE(s.prio, 0xFFFFu) << who << ": tc priorities are 16-bit";
      EXPECT_NE(s.prio, kTcPrioLabLast) << who << " takes the lab instruments' last slot";
      auto [it, fresh] = owner.emplace(s.prio, who);
      EXPECT_TRUE(fresh) << who << " and " << it->second << " share tc priority 0x" << std::hex << s.prio;
    }
  }
  EXPECT_GE(slots, 7u) << "fewer slots than flowstat, pac, ein, aqm (2), switch and floodgate declare";
}

TEST(TcPriorities, EveryMechanismWithAnInterfaceModuleDeclaresItsSlots) {
  for (const MechanismInfo& m : mechanisms()) {
    if (m.host_module || m.switch_module) {
      EXPECT_FALSE(m.tc.empty()) << m.name << " attaches on interfaces but declares no tc priority";
    }
  }
}

// The order the mechanisms' comments promise under clsact, where priorities
// order the chain (under tcx, kPrioTcxFront only splits the front from the
// rest, tc.cc).
TEST(TcPriorities, OrderTheMechanismsRelyOn) {
  std::map<std::string, uint32_t> prio;
  for (const MechanismInfo& m : mechanisms())
    for (const TcSlot& s : m.tc) prio[s.programs] = s.prio;
  uint32_t flowstat = prio.at("flowstat_in, flowstat_out");
  EXPECT_LT(prio.at("pac_ingress, pac_egress"), flowstat) << "a re-injected ACK would be counted twice";
  EXPECT_LT(prio.at("dp_ingress, dp_egress"), flowstat) << "a re-sent frame would be counted twice";
  EXPECT_LT(prio.at("sw_ingress, sw_egress"), flowstat) << "flowstat would count consumed control frames";
  EXPECT_GT(prio.at("ein_ingress, ein_egress"), flowstat);
  EXPECT_GT(prio.at("aqm_egress"), flowstat);
  EXPECT_LT(prio.at("aqm_departure"), kPrioTcxFront) << "aqm_departure must run first under tcx too";
  for (const auto& [programs, p] : prio) EXPECT_LT(p, kTcPrioLabLast) << programs << " would run after sluice-fault";
}

}  // namespace
}  // namespace sluice
