// weir template: render a chat template, to see the exact prompt weir will feed a model, and for
// the jinja2 oracle (tests/chat/jinja_oracle.py). The template is the model's (-m, as weir chat
// picks it), a built-in (--chat-template NAME) or a file (--template-file); the variables come
// from a JSON object (--context: messages, add_generation_prompt, bos_token, tools, ...).
#include <cstdio>

#include "chat/builtin_templates.h"
#include "chat/chat_template.h"
#include "common/cli.h"
#include "common/commands.h"
#include "common/tokenizer_load.h"
#include "format/gguf_reader.h"
#include "format/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace weir::tools {
namespace {

// Ordered: templates print dicts (tojson) in the order the JSON gives them, as Python does.
chat::Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return chat::Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return chat::Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return chat::Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return chat::Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return chat::Value::String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      chat::ValueList items;
      for (const auto& x : j) items.push_back(FromJson(x));
      return chat::Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      chat::Value d = chat::Value::Dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.Set(it.key(), FromJson(it.value()));
      return d;
    }
    default:
      return chat::Value();
  }
}

}  // namespace

int TemplateMain(int argc, char** argv) {
  CLI::App app("Render a chat template (the model's, a built-in or a file) with a JSON context.",
               "template");
  std::string model, builtin, file, context_path;
  bool source_only = false;
  app.add_option("-m,--model", model, "take the template the way weir chat does for this model");
  app.add_option("--chat-template", builtin,
                 "a built-in template: " + chat::BuiltinTemplateNames());
  app.add_option("--template-file", file, "a Jinja template file");
  app.add_option("--context", context_path,
                 "JSON object of template variables (messages, add_generation_prompt, bos_token, "
                 "eos_token, ...); default: one user message");
  app.add_flag("--source", source_only, "print the template's source instead of rendering it");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;

  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                {"add_generation_prompt", true}};
  if (!context_path.empty()) {
    auto text = format::ReadSmallFile(context_path, 64ull << 20);
    if (!text.ok()) return Fail("template", text.status());
    ctx = nlohmann::ordered_json::parse(*text, nullptr, false);
    if (ctx.is_discarded() || !ctx.is_object()) {
      return Fail("template", Status::InvalidArgument(context_path + ": not a JSON object"));
    }
  }
  std::string source, note;
  if (!file.empty()) {
    auto text = format::ReadSmallFile(file, 16ull << 20);
    if (!text.ok()) return Fail("template", text.status());
    source = *text;
  } else {
    std::string file_template, arch;
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (!model.empty()) {
      auto spec = LoadTokenizerSpec(model, "");
      if (!spec.ok()) return Fail("template", spec.status());
      file_template = spec->chat_template;
      auto t = tokenizer::Tokenizer::Create(*spec);
      if (!t.ok()) return Fail("template", t.status());
      tok = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
      auto gguf = format::GgufFile::Open(model);
      if (gguf.ok() && gguf->Has("general.architecture")) {
        auto a = gguf->GetString("general.architecture");
        if (a.ok()) arch = *a;
      }
      if (!ctx.contains("bos_token") && tok->bos_id() >= 0)
        ctx["bos_token"] = std::string(tok->piece(tok->bos_id()));
      if (!ctx.contains("eos_token") && tok->eos_id() >= 0)
        ctx["eos_token"] = std::string(tok->piece(tok->eos_id()));
    } else if (builtin.empty()) {
      return Fail("template", Status::InvalidArgument(
                                  "give -m MODEL, --chat-template NAME or --template-file FILE"));
    }
    auto has = [&](std::string_view piece) { return tok && tok->FindSpecial(piece) >= 0; };
    auto t = chat::ChatTemplate::Select(builtin, file_template, arch, has);
    if (!t.ok()) return Fail("template", t.status());
    source = t->source();
    note = t->note();
  }
  if (!note.empty()) std::fprintf(stderr, "weir template: %s\n", note.c_str());
  if (source_only) {
    std::fwrite(source.data(), 1, source.size(), stdout);
    return kExitOk;
  }
  auto parsed = chat::JinjaTemplate::Parse(source);
  if (!parsed.ok()) return Fail("template", parsed.status());
  auto out = parsed->Render(FromJson(ctx));
  if (!out.ok()) return Fail("template", out.status());
  std::fwrite(out->data(), 1, out->size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace weir::tools
