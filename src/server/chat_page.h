// The chat page `fp8lm serve` answers GET / with: src/server/chat_page.html,
// one self-contained HTML file (its CSS and JavaScript inline, nothing fetched
// from elsewhere, so it works offline), compiled into the binary by CMake
// (server.cmake writes its bytes into chat_page.cpp from chat_page.cpp.in).
// The page talks to the same server's OpenAI API (POST /v1/chat/completions,
// streamed) and reads GET /v1/fp8lm/model (server/model_info.h).
#pragma once

#include <string_view>

namespace fp8lm::server {

// The page's bytes (UTF-8 HTML), exactly as in the file.
std::string_view chat_page_html();

}  // namespace fp8lm::server
