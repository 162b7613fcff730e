// Flags and setup shared by `weir chat` and `weir run --chat`: the chat template (the file's, or
// --chat-template NAME), the system message, --no-special, and the tokens that end a reply (EOS
// and the template's end-of-turn markers, when the vocabulary has them).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat_template.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace weir::tools {

struct ChatFlags {
  std::string chat_template;  // --chat-template NAME ("" = the file's)
  std::string template_file;  // --chat-template-file FILE: a Jinja template instead
  std::string system;         // --system TEXT
  bool no_special = false;    // --no-special: special-token text in messages stays text
};
void AddChatFlags(CLI::App& app, ChatFlags* flags);

struct ChatSetup {
  chat::ChatTemplate tmpl;
  std::string bos_piece, eos_piece;  // bos_token / eos_token of the template
  std::vector<int32_t> stop_ids;     // sampling one of these ends the reply
  const tokenizer::Tokenizer* tok = nullptr;
  bool parse_special = true;

  bool IsStop(int32_t id) const;
  // Token ids of rendered template text; BOS is added when the tokenizer asks for it and the text
  // does not already start with it (templates such as Gemma's and Llama 3's write it). Special
  // tokens are parsed, except inside `literals` (message texts, found in order in `text`) when
  // parse_special is off (--no-special).
  std::vector<int32_t> Encode(const std::string& text, bool at_start,
                              const std::vector<std::string>& literals = {}) const;
};
Result<ChatSetup> SetupChat(const ChatFlags& flags, const model::Model& model);

}  // namespace weir::tools
