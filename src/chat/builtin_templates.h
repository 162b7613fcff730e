// The chat templates weir carries for files that have none (or for --chat-template NAME): chatml,
// llama3, gemma, phi3, mistral, written after the templates those families' tokenizer_config.json
// files ship (text-only: no tools, no images).
//
// Thread safety: constant data.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace weir::chat {

struct BuiltinTemplate {
  std::string_view name;
  std::string_view source;       // Jinja
  std::string_view end_of_turn;  // the piece that ends an assistant turn ("" = EOS only)
};

const std::vector<BuiltinTemplate>& BuiltinTemplates();
// nullptr when unknown.
const BuiltinTemplate* FindBuiltinTemplate(std::string_view name);
// "chatml, llama3, gemma, phi3, mistral".
std::string BuiltinTemplateNames();

}  // namespace weir::chat
