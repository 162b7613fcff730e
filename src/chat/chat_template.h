// ChatTemplate: turns a conversation into the prompt text a chat model was trained on, with the
// model file's own Jinja template (GGUF tokenizer.chat_template) or a built-in one
// (builtin_templates.h), chosen once from the file and the flags:
//   --chat-template NAME   that built-in template, whatever the file carries;
//   the file's template    when it has one;
//   its family's built-in  when it has none (Gemma 3 270M): from the architecture, or from the
//                          turn markers in the vocabulary; the choice is stated in note().
// A template that does not parse, or that fails on a one-message conversation, is refused at
// selection with the template's line and the reason.
//
// Thread safety: immutable after Select; Apply is const.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja_template.h"

namespace weir::chat {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // `has_token(piece)`: whether the vocabulary has that special token (to recognise a family).
  static Result<ChatTemplate> Select(const std::string& name, const std::string& file_template,
                                     const std::string& architecture,
                                     const std::function<bool(std::string_view)>& has_token);
  // A template from source text; `name` is for messages.
  static Result<ChatTemplate> FromSource(const std::string& source, const std::string& name);

  // The prompt text for `messages`; with add_generation_prompt the assistant's turn is opened.
  Result<std::string> Apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            const std::string& bos_token, const std::string& eos_token) const;

  const std::string& name() const { return name_; }      // "file" or a built-in name
  const std::string& source() const { return source_; }  // the Jinja text
  const std::string& note() const { return note_; }      // why this template ("" = the file's)
  // Pieces that end an assistant turn besides EOS: the built-in's marker, or the known markers
  // (<|im_end|>, <|eot_id|>, <|eom_id|>, <end_of_turn>, <|end|>) the template text mentions.
  const std::vector<std::string>& end_of_turn() const { return end_of_turn_; }

 private:
  std::string name_, source_, note_;
  std::vector<std::string> end_of_turn_;
  JinjaTemplate jinja_;
};

}  // namespace weir::chat
