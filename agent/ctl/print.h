// sluicectl's human-readable views of sluiced's control-socket replies.
// The reply comes from whatever listens on the socket path, so it is
// untrusted input: a reply that lacks a key or has the wrong type makes
// these functions throw nlohmann::json::exception (sluicectl reports
// "unexpected reply"); they never read past what the reply holds.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::ctl {

std::string human_bytes(double bytes);  // "3.4 MiB"
// *out = v as a counter when v is a non-negative integer or a float that
// fits in 64 bits; false otherwise (json's get<uint64_t>() of an
// out-of-range float is a conversion with undefined behaviour).
bool as_count(const nlohmann::json& v, unsigned long long* out);
void print_status(std::FILE* out, const nlohmann::json& reply);
void print_stats(std::FILE* out, const nlohmann::json& reply);
void print_flows(std::FILE* out, const nlohmann::json& reply);

}  // namespace sluice::ctl
