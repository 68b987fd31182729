// Chat template texts the chat tests render and check against: Hugging Face's Llama-2-chat
// template (the Jinja that Llama-2-chat GGUFs carry), for engine/tokenizer's renderer and
// engine/sessions' turn-by-turn formatter.
#pragma once

#include <string_view>

namespace streamd::tokenizer::testing {

// Hugging Face's Llama-2-chat template.
constexpr std::string_view kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% "
    "set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 "
    "== 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
    "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
    "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

}  // namespace streamd::tokenizer::testing
