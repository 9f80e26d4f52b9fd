#include "mechanisms/bfc/bfc_view.h"

#include <sstream>

namespace sluice::bfc {

nlohmann::json view(const BfcLogic& logic, const sw::Substrate& sw) {
  using nlohmann::json;
  const Counters& c = logic.counters();
  json out;
  out["variant"] = logic.config().variant;
  out["counters"] = {{"assignments", c.assignments},
                     {"collisions", c.collisions},
                     {"table_index_shared", c.table_index_shared},
                     {"above_th", c.above_th},
                     {"pauses_sent", c.pauses_sent},
                     {"resumes_sent", c.resumes_sent},
                     {"bitmaps_sent", c.bitmaps_sent},
                     {"pauses_rx", c.pauses_rx},
                     {"resumes_rx", c.resumes_rx},
                     {"bitmaps_rx", c.bitmaps_rx},
                     {"stale_rx", c.stale_rx},
                     {"bad_queue_rx", c.bad_queue_rx},
                     {"bitmap_repairs", c.bitmap_repairs},
                     {"expired", c.expired},
                     {"drops_undone", c.drops_undone}};
  json ports = json::array();
  for (PortId p = 0; p < sw.num_ports(); ++p) {
    const auto& pc = sw.port(p);
    json port = {{"port", p},
                 {"name", pc.name},
                 {"rate_bps", pc.rate_bps},
                 {"threshold_bytes", logic.threshold_bytes(p)},
                 {"active_queues", logic.active_queues(p)},
                 {"flow_table", {{"entries", logic.table_entries(p)}, {"live", logic.live_entries(p)}}}};
    json queues = json::array();
    for (QueueId q = 0; q < pc.queues.size(); ++q) {
      sw::QueueDepth d = sw.depth(p, q);
      uint32_t flows = logic.flows_in_queue(p, q);
      bool paused = sw.paused(p, q);
      if (!d.pkts && !flows && !paused) continue;
      queues.push_back({{"queue", q}, {"bytes", d.bytes}, {"pkts", d.pkts}, {"flows", flows}, {"paused", paused}});
    }
    port["queues"] = std::move(queues);
    json counters = json::array();
    for (const auto& [uq, n] : logic.pause_counters(p)) counters.push_back({{"upstream_q", uq}, {"count", n}});
    port["pause_counters"] = std::move(counters);
    ports.push_back(std::move(port));
  }
  out["ports"] = std::move(ports);
  // Sampled mode's queue-vs-Th trace: [t_us, port, queue, bytes, th_bytes].
  json trace = json::array();
  for (const auto& t : logic.trace()) trace.push_back({t.t_ns / 1000, t.port, t.queue, t.bytes, t.th_bytes});
  out["trace"] = std::move(trace);
  out["samples"] = c.samples;
  return out;
}

nlohmann::json view_from_status(const nlohmann::json& status, std::string& why) {
  why.clear();
  auto sw = status.find("switch");
  if (sw == status.end() || !sw->is_object()) {
    why = "sluiced is not in switch mode ([switch] ports is empty)";
    return nlohmann::json::object();
  }
  auto logic = sw->find("logic");
  std::string name = logic != sw->end() && logic->is_string() ? logic->get<std::string>() : "?";
  auto st = sw->find("logic_state");
  if (name.rfind("bfc", 0) != 0 || st == sw->end() || !st->is_object() || !st->contains("ports")) {
    why = "the switch runs logic '" + name + "', not bfc";
    return nlohmann::json::object();
  }
  return *st;
}

std::string render_text(const nlohmann::json& v) {
  std::ostringstream os;
  os << "bfc variant " << v.value("variant", "?") << "\n";
  const auto& c = v.at("counters");
  // The sampled mode sees no packets, so no flow sharing a queue: say so
  // rather than print a zero.
  if (v.value("samples", 0) > 0) os << "  collisions n/a (sampled mode), pauses sent ";
  else os << "  collisions " << c.at("collisions") << ", pauses sent ";
  os << c.at("pauses_sent") << ", resumes sent " << c.at("resumes_sent") << ", pauses received " << c.at("pauses_rx")
     << ", bitmap repairs " << c.at("bitmap_repairs") << ", expired " << c.at("expired") << "\n";
  for (const auto& p : v.at("ports")) {
    os << "port " << p.at("port") << " " << p.at("name").get<std::string>() << ": Th " << p.at("threshold_bytes")
       << " B, active queues " << p.at("active_queues") << ", flow table " << p.at("flow_table").at("live") << "/"
       << p.at("flow_table").at("entries") << " live\n";
    for (const auto& q : p.at("queues"))
      os << "  queue " << q.at("queue") << ": " << q.at("bytes") << " B in " << q.at("pkts") << " pkts, "
         << q.at("flows") << " flows" << (q.at("paused").get<bool>() ? ", PAUSED by the next hop" : "") << "\n";
    for (const auto& pc : p.at("pause_counters"))
      os << "  pausing upstream queue " << pc.at("upstream_q") << " (" << pc.at("count") << " packets above Th)\n";
  }
  return os.str();
}

}  // namespace sluice::bfc
