// Shared helpers of the chat-template tests: fixture loading and a pinned clock.
#pragma once

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/eval.h"

namespace fp8lm::test {

// Key order matters to the renderer (tojson), so fixtures are read ordered.
inline nlohmann::ordered_json read_ordered_json(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

inline std::filesystem::path chat_fixture(const std::string& name) {
  return std::filesystem::path(FP8LM_FIXTURE_DIR) / "chat" / name;
}

// The time tools/make_chat_fixtures.py pins strftime_now to: Sat 2025-07-26 12:34:56.
inline chat::RenderEnv fixed_clock_env() {
  chat::RenderEnv env;
  env.now = [] {
    std::tm tm{};
    tm.tm_year = 125;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    tm.tm_hour = 12;
    tm.tm_min = 34;
    tm.tm_sec = 56;
    tm.tm_wday = 6;
    tm.tm_yday = 206;
    return tm;
  };
  return env;
}

}  // namespace fp8lm::test
