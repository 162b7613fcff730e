#include "common/chat_flags.h"

#include <algorithm>

#include "chat/builtin_templates.h"
#include "format/mapped_file.h"

namespace weir::tools {

void AddChatFlags(CLI::App& app, ChatFlags* f) {
  app.add_option("--chat-template", f->chat_template,
                 "use this built-in chat template instead of the model file's: " +
                     chat::BuiltinTemplateNames());
  app.add_option("--chat-template-file", f->template_file,
                 "use the Jinja chat template in this file instead of the model file's")
      ->excludes("--chat-template");
  app.add_option("--system", f->system, "system message that starts the conversation");
  app.add_flag("--no-special", f->no_special,
               "treat special-token text typed in a message (e.g. <|im_start|>) as plain text "
               "(the template's own markers stay special)");
}

bool ChatSetup::IsStop(int32_t id) const {
  return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
}

std::vector<int32_t> ChatSetup::Encode(const std::string& text, bool at_start,
                                       const std::vector<std::string>& literals) const {
  const bool has_bos = !bos_piece.empty() && text.rfind(bos_piece, 0) == 0;
  const bool add_bos = at_start && tok->add_bos() && !has_bos;
  if (parse_special || literals.empty()) return tok->Encode(text, add_bos, true);
  // Template text with its markers parsed; each message text, where it appears, as plain text.
  std::vector<int32_t> ids = tok->Encode("", add_bos, true);
  size_t pos = 0;
  for (const std::string& lit : literals) {
    if (lit.empty()) continue;
    size_t hit = text.find(lit, pos);
    if (hit == std::string::npos) continue;
    std::vector<int32_t> a = tok->Encode(text.substr(pos, hit - pos), false, true);
    std::vector<int32_t> b = tok->Encode(lit, false, false);
    ids.insert(ids.end(), a.begin(), a.end());
    ids.insert(ids.end(), b.begin(), b.end());
    pos = hit + lit.size();
  }
  std::vector<int32_t> rest = tok->Encode(text.substr(pos), false, true);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

Result<ChatSetup> SetupChat(const ChatFlags& flags, const model::Model& model) {
  const tokenizer::Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) {
    return Status::InvalidArgument(model.file().path +
                                   ": the model has no tokenizer; pass --tokenizer");
  }
  auto has = [tok](std::string_view piece) { return tok->FindSpecial(piece) >= 0; };
  Result<chat::ChatTemplate> selected = Status::InvalidArgument("no template");
  if (!flags.template_file.empty()) {
    WEIR_ASSIGN_OR_RETURN(std::string source, format::ReadSmallFile(flags.template_file, 16ull << 20));
    selected = chat::ChatTemplate::FromSource(source, flags.template_file);
  } else {
    selected = chat::ChatTemplate::Select(flags.chat_template, model.file().tokenizer.chat_template,
                                          model.config().arch->name, has);
  }
  WEIR_ASSIGN_OR_RETURN(chat::ChatTemplate t, std::move(selected));
  ChatSetup s{std::move(t)};
  s.tok = tok;
  s.parse_special = !flags.no_special;
  if (tok->bos_id() >= 0) s.bos_piece = std::string(tok->piece(tok->bos_id()));
  if (tok->eos_id() >= 0) {
    s.eos_piece = std::string(tok->piece(tok->eos_id()));
    s.stop_ids.push_back(tok->eos_id());
  }
  for (const std::string& marker : s.tmpl.end_of_turn()) {
    int32_t id = tok->FindSpecial(marker);
    if (id >= 0 && !s.IsStop(id)) s.stop_ids.push_back(id);
  }
  return s;
}

}  // namespace weir::tools
