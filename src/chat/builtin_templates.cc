#include "chat/builtin_templates.h"

namespace weir::chat {

namespace {

// ChatML as Qwen and SmolLM2 use it, without a default system message.
constexpr std::string_view kChatml =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Llama 3 Instruct.
constexpr std::string_view kLlama3 =
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

// Gemma (2 and 3, text): a system message becomes the first user turn's prefix; roles alternate.
constexpr std::string_view kGemma =
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = messages[0]['content'] + '\\n\\n' %}"
    "{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') + "
    "message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

// Phi-3 (mini, medium).
constexpr std::string_view kPhi3 =
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ '<|assistant|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

// Mistral Instruct (v0.1-v0.3 style): the system message joins the first user turn.
constexpr std::string_view kMistral =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must "
    "alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n"
    "    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n"
    "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token }}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the "
    "exception of an initial optional system message!') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";

}  // namespace

const std::vector<BuiltinTemplate>& BuiltinTemplates() {
  static const std::vector<BuiltinTemplate> kAll = {
      {"chatml", kChatml, "<|im_end|>"},  {"llama3", kLlama3, "<|eot_id|>"},
      {"gemma", kGemma, "<end_of_turn>"}, {"phi3", kPhi3, "<|end|>"},
      {"mistral", kMistral, ""},
  };
  return kAll;
}

const BuiltinTemplate* FindBuiltinTemplate(std::string_view name) {
  for (const BuiltinTemplate& t : BuiltinTemplates()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string BuiltinTemplateNames() {
  std::string out;
  for (const BuiltinTemplate& t : BuiltinTemplates()) {
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

}  // namespace weir::chat
