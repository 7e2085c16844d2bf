/* templates.h over llama.cpp's common library: glue only. Each function
 * turns JSON into common's structures, calls common as llama-server calls
 * it (tools/server: oaicompat_chat_params_parse, task_result_state) and
 * turns the result back into JSON; no C++ exception leaves this file. */
#include "serve/upstream/templates.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "chat.h"
#include "common.h"
#include "json-schema-to-grammar.h"
#include "serve/upstream/upstream.hpp"

using namespace up;

namespace {

std::string random_id() {
  static const char abc[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937 gen{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, sizeof(abc) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; i++)
    id += abc[pick(gen)];
  return id;
}

} // namespace

/* ---- Chat templates ---------------------------------------------------- */

struct up_chat_s {
  common_chat_templates_ptr tmpls;
  bool jinja = true;
  bool explicit_template = true;
  bool thinking = false; /* llama-server's enable_thinking default */
  std::string bos, eos;
};

/* Whether llama.cpp's built-in templates (llama_chat_apply_template)
 * render src, a name or a template's source. */
static bool builtin_renders(const std::string &src) {
  llama_chat_message probe = {"user", "x"};
  return llama_chat_apply_template(src.c_str(), &probe, 1, true, nullptr,
                                   0) >= 0;
}

static bool builtin_name(const std::string &name) {
  int32_t n = llama_chat_builtin_templates(nullptr, 0);
  std::vector<const char *> names(n > 0 ? n : 0);
  llama_chat_builtin_templates(names.data(), names.size());
  for (const char *s : names)
    if (name == s)
      return true;
  return false;
}

int up_chat_new(up_chat_t **out, const struct llama_model *model,
                const char *template_override, bool jinja, char *err,
                size_t errlen) {
  *out = nullptr;
  return guard(err, errlen, [&] {
    std::string over = template_override ? template_override : "";
    auto t = std::make_unique<up_chat_s>();
    t->jinja = jinja;
    if (jinja && over != "chatml" && builtin_name(over))
      throw bad("\"" + over + "\" is a name of llama.cpp's built-in "
                "templates, which Jinja would take for a template's text: "
                "give the template's source, or turn Jinja off");
    if (!jinja) {
      /* The GGUF's template when llama.cpp knows it, else ChatML (as serve
       * did before); an override it does not know is refused. */
      const char *own = model ? llama_model_chat_template(model, nullptr)
                              : nullptr;
      if (over.empty() && (own == nullptr || !builtin_renders(own))) {
        over = "chatml";
        t->explicit_template = false;
      } else if (!over.empty() && !builtin_renders(over)) {
        throw bad("llama.cpp's built-in templates know no chat template "
                  "named or written \"" + over.substr(0, 60) + "\"");
      }
    } else if (over.empty() && model != nullptr &&
               llama_model_chat_template(model, nullptr) == nullptr &&
               llama_model_chat_template(model, "tool_use") == nullptr) {
      t->explicit_template = false; /* common stands ChatML in */
    }
    t->tmpls = common_chat_templates_init(model, over);
    if (jinja) {
      /* Renders a message once, as llama-server does at start, so that a
       * template that fails is refused now rather than at each request. */
      t->thinking = common_chat_templates_support_enable_thinking(
          t->tmpls.get());
    }
    if (model != nullptr) {
      const llama_vocab *vocab = llama_model_get_vocab(model);
      if (llama_vocab_bos(vocab) != LLAMA_TOKEN_NULL)
        t->bos = common_token_to_piece(vocab, llama_vocab_bos(vocab), true);
      if (llama_vocab_eos(vocab) != LLAMA_TOKEN_NULL)
        t->eos = common_token_to_piece(vocab, llama_vocab_eos(vocab), true);
    }
    *out = t.release();
    return 0;
  });
}

void up_chat_free(up_chat_t *t) { delete t; }

int up_chat_info(const up_chat_t *t, char **out_json, char *err,
                 size_t errlen) {
  *out_json = nullptr;
  return guard(err, errlen, [&] {
    json o = json::object(), caps = json::object();
    o["chat_template"] = common_chat_templates_source(t->tmpls.get(), "");
    std::string tools =
        common_chat_templates_source(t->tmpls.get(), "tool_use");
    if (t->jinja && !tools.empty())
      o["chat_template_tool_use"] = tools;
    for (const auto &kv : common_chat_templates_get_caps(t->tmpls.get()))
      caps[kv.first] = kv.second;
    o["chat_template_caps"] = caps;
    o["jinja"] = t->jinja;
    o["explicit"] = t->explicit_template;
    o["supports_thinking"] = t->thinking;
    o["bos_token"] = t->bos;
    o["eos_token"] = t->eos;
    return give(o.dump_safe(), out_json);
  });
}

/* The checks llama-server makes of the messages before common parses
 * them (oaicompat_chat_params_parse); media are not served here. None at
 * all is llama-server's to take too: shared/render.c says which routes
 * want some (render_apply_min). */
static void check_messages(const json &messages) {
  if (!messages.is_array())
    throw bad("\"messages\" must be a list of messages");
  for (const auto &msg : messages) {
    if (!msg.is_object())
      throw bad("each of \"messages\" must be an object");
    std::string role = str(msg, "role", "");
    if (role == "assistant") {
      if (!msg.contains("content") && !msg.contains("tool_calls"))
        throw bad("an assistant message needs a \"content\" or "
                  "\"tool_calls\"");
    } else if (!msg.contains("content")) {
      throw bad("every message but the assistant's needs a \"content\"");
    }
    if (!msg.contains("content") || msg.at("content").is_string() ||
        msg.at("content").is_null())
      continue;
    if (!msg.at("content").is_array())
      throw bad("a message's \"content\" must be a string or a list of "
                "parts");
    for (const auto &part : msg.at("content"))
      if (!part.is_object() || str(part, "type", "") != "text")
        throw bad("a message's content parts must be of type \"text\" "
                  "(this model takes no images, audio or video)");
  }
}

/* tool_choice: OpenAI's strings, or its object naming one function, which
 * keeps that tool alone and requires it (llama-server has no such form). */
static common_chat_tool_choice tool_choice_of(const json &body,
                                              json &tools) {
  const json *v = field(body, "tool_choice");
  if (v == nullptr)
    return COMMON_CHAT_TOOL_CHOICE_AUTO;
  if (v->is_string()) {
    try {
      return common_chat_tool_choice_parse_oaicompat(v->get<std::string>());
    } catch (const std::exception &) {
      throw bad("\"tool_choice\" must be \"auto\", \"none\", \"required\" "
                "or {\"type\":\"function\",\"function\":{\"name\":...}}");
    }
  }
  const json *fn = v->is_object() ? field(*v, "function") : nullptr;
  std::string name = fn != nullptr && fn->is_object() ? str(*fn, "name", "")
                                                       : "";
  if (name.empty())
    throw bad("\"tool_choice\" must be \"auto\", \"none\", \"required\" or "
              "{\"type\":\"function\",\"function\":{\"name\":...}}");
  json kept = json::array();
  for (const auto &tool : tools) {
    const json *f = tool.is_object() ? field(tool, "function") : nullptr;
    if (f != nullptr && f->is_object() && str(*f, "name", "") == name)
      kept.push_back(tool);
  }
  if (kept.empty())
    throw bad("\"tool_choice\" names \"" + name + "\", which is not among "
              "the \"tools\"");
  tools = kept;
  return COMMON_CHAT_TOOL_CHOICE_REQUIRED;
}

int up_chat_apply(const up_chat_t *t, const char *request_json,
                  char **out_json, char *err, size_t errlen) {
  *out_json = nullptr;
  return guard(err, errlen, [&] {
    json body = parse(request_json, "the request");
    json tools = json::array();
    if (const json *v = field(body, "tools")) {
      if (!v->is_array())
        throw bad("\"tools\" must be a list of tools");
      tools = *v;
    }
    common_chat_tool_choice choice = tool_choice_of(body, tools);
    bool stream = flag(body, "stream", false);
    if (!t->jinja && !tools.empty())
      throw bad("\"tools\" need a Jinja chat template (Jinja is off)");
    if (!t->jinja && choice != COMMON_CHAT_TOOL_CHOICE_AUTO)
      throw bad("\"tool_choice\" needs a Jinja chat template (Jinja is off)");

    json schema = field(body, "json_schema") ? body.at("json_schema") : json();
    std::string grammar = str(body, "grammar", "");
    if (!schema.is_null() && !grammar.empty())
      throw bad("Cannot use both json_schema and grammar");
    if (const json *rf = field(body, "response_format")) {
      if (!rf->is_object())
        throw bad("\"response_format\" must be an object");
      std::string type = str(*rf, "type", "");
      if (type == "json_object") {
        if (rf->contains("schema") || schema.is_null())
          schema = rf->value("schema", json::object());
      } else if (type == "json_schema") {
        const json *w = field(*rf, "json_schema");
        schema = w != nullptr && w->is_object()
                     ? w->value("schema", json::object()) : json::object();
      } else if (!type.empty() && type != "text") {
        throw bad("\"response_format\" type must be one of \"text\", "
                  "\"json_object\" or \"json_schema\", not \"" + type + "\"");
      }
    }
    if (!schema.is_null() && !schema.is_object())
      throw bad("a JSON schema must be an object");

    if (!body.contains("messages"))
      throw bad("\"messages\" is required");
    check_messages(body.at("messages"));

    auto caps = common_chat_templates_get_caps(t->tmpls.get());
    common_chat_templates_inputs in;
    in.messages = common_chat_msgs_parse_oaicompat(body.at("messages"));
    in.tools = common_chat_tools_parse_oaicompat(tools);
    in.tool_choice = choice;
    in.json_schema = schema.is_null() ? "" : schema.dump();
    in.grammar = grammar;
    in.use_jinja = t->jinja;
    in.parallel_tool_calls =
        flag(body, "parallel_tool_calls", caps["supports_parallel_tool_calls"]);
    in.add_generation_prompt = flag(body, "add_generation_prompt", true);
    in.continue_final_message =
        body.contains("continue_final_message")
            ? common_chat_continuation_parse(body.at("continue_final_message"))
            : COMMON_CHAT_CONTINUATION_NONE;
    /* A trailing assistant message is continued, as llama-server's
     * prefill_assistant (on by default) does. */
    size_t n = in.messages.size();
    if (in.continue_final_message == COMMON_CHAT_CONTINUATION_NONE &&
        n > 0 && in.messages.back().role == "assistant") {
      if (n >= 2 && in.messages[n - 2].role == "assistant")
        throw bad("Cannot have 2 or more assistant messages at the end of "
                  "the list.");
      in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
      in.add_generation_prompt = false;
    }
    if (in.continue_final_message != COMMON_CHAT_CONTINUATION_NONE &&
        in.add_generation_prompt)
      throw bad("Cannot set both add_generation_prompt and "
                "continue_final_message to true.");
    if (in.continue_final_message != COMMON_CHAT_CONTINUATION_NONE &&
        n > 0 && in.messages.back().role == "assistant" &&
        !in.messages.back().tool_calls.empty())
      throw bad("Cannot continue an assistant message that contains tool "
                "calls.");
    try {
      in.reasoning_format =
          common_reasoning_format_from_name(str(body, "reasoning_format",
                                                "deepseek"));
    } catch (const bad &) {
      throw;
    } catch (const std::exception &) {
      throw bad("\"reasoning_format\" must be \"none\", \"auto\", "
                "\"deepseek\" or \"deepseek-legacy\"");
    }
    in.enable_thinking = t->thinking;
    bool tools_on = !in.tools.empty() &&
                    in.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE;
    if (tools_on && body.contains("grammar"))
      throw bad("Cannot use custom grammar constraints with tools.");
    if (const json *kw = field(body, "chat_template_kwargs")) {
      if (!kw->is_object())
        throw bad("\"chat_template_kwargs\" must be an object");
      for (const auto &item : kw->items())
        in.chat_template_kwargs[item.key()] = item.value().dump();
    }
    auto et = in.chat_template_kwargs.find("enable_thinking");
    if (et != in.chat_template_kwargs.end()) {
      if (et->second == "true" || et->second == "false")
        in.enable_thinking = et->second == "true";
      else
        throw bad("\"chat_template_kwargs\": \"enable_thinking\" must be "
                  "true or false");
    }
    std::string effort = str(body, "reasoning_effort", "");
    if (effort == "none") {
      in.enable_thinking = false;
      in.chat_template_kwargs.erase("reasoning_effort");
    } else if (!effort.empty()) {
      in.chat_template_kwargs["reasoning_effort"] = json(effort).dump();
    }

    common_chat_params cp = common_chat_templates_apply(t->tmpls.get(), in);

    json o = json::object();
    o["prompt"] = cp.prompt;
    o["chat_format"] = common_chat_format_name(cp.format);
    if (!cp.grammar.empty()) {
      o["grammar"] = cp.grammar;
      o["grammar_type"] = "tool_calls";
    }
    o["grammar_lazy"] = cp.grammar_lazy;
    json triggers = json::array();
    for (const auto &tr : cp.grammar_triggers) {
      json one = {{"type", static_cast<int>(tr.type)}, {"value", tr.value}};
      if (tr.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN)
        one["token"] = static_cast<int>(tr.token);
      triggers.push_back(one);
    }
    o["grammar_triggers"] = triggers;
    o["preserved_tokens"] = cp.preserved_tokens;
    o["generation_prompt"] = cp.generation_prompt;
    o["additional_stops"] = cp.additional_stops;
    o["parse_tool_calls"] = tools_on;
    if (!cp.thinking_end_tags.empty()) {
      int budget = -1;
      number(body, "thinking_budget_tokens", budget, -1, BIG, false);
      number(body, "reasoning_budget_tokens", budget, -1, BIG, false);
      o["reasoning_budget_tokens"] = budget;
      o["reasoning_budget_start_tag"] = cp.thinking_start_tag;
      o["reasoning_budget_end_tags"] = cp.thinking_end_tags;
      o["reasoning_budget_message"] = str(body, "reasoning_budget_message", "");
    }
    if (flag(body, "logprobs", false)) {
      if (tools_on && stream)
        throw bad("logprobs is not supported with tools + stream");
      int top = 20;
      number(body, "top_logprobs", top, 0, BIG, false);
      o["n_probs"] = top;
    } else if (field(body, "top_logprobs")) {
      throw bad("top_logprobs requires logprobs to be set to true");
    }
    common_reasoning_format rf = in.reasoning_format;
    o["parser"] = json{
        {"format", static_cast<int>(cp.format)},
        {"chat_parser", cp.parser},
        {"generation_prompt", cp.generation_prompt},
        {"reasoning_format", common_reasoning_format_name(rf)},
        {"reasoning_in_content",
         stream && rf == COMMON_REASONING_FORMAT_DEEPSEEK_LEGACY},
        {"parse_tool_calls", flag(body, "parse_tool_calls", true)},
        {"is_continuation",
         in.continue_final_message != COMMON_CHAT_CONTINUATION_NONE},
    };
    return give(o.dump_safe(), out_json);
  });
}

/* ---- Reading the generated text back ------------------------------------ */

struct up_parser_s {
  common_chat_parser_params params;
  std::string text;
  common_chat_msg msg;
  std::vector<std::string> ids;
};

int up_parser_new(up_parser_t **out, const char *parser_json, char *err,
                  size_t errlen) {
  *out = nullptr;
  return guard(err, errlen, [&] {
    json j = parse(parser_json, "the parser");
    auto p = std::make_unique<up_parser_s>();
    int format = 0;
    number(j, "format", format, 0, COMMON_CHAT_FORMAT_COUNT - 1, false);
    p->params.format = static_cast<common_chat_format>(format);
    p->params.generation_prompt = str(j, "generation_prompt", "");
    p->params.reasoning_format =
        common_reasoning_format_from_name(str(j, "reasoning_format", "none"));
    p->params.reasoning_in_content = flag(j, "reasoning_in_content", false);
    p->params.parse_tool_calls = flag(j, "parse_tool_calls", true);
    p->params.is_continuation = flag(j, "is_continuation", false);
    std::string arena = str(j, "chat_parser", "");
    if (!arena.empty())
      p->params.parser.load(arena);
    p->msg.role = "assistant";
    /* A continued message starts from what its prefill parses to, so that
     * the first delta does not repeat the prefill (task_result_state). */
    if (p->params.is_continuation)
      p->msg = common_chat_parse("", true, p->params);
    *out = p.release();
    return 0;
  });
}

void up_parser_free(up_parser_t *p) { delete p; }

/* One of common's diffs as an OpenAI chat chunk's delta. */
static json delta_of(const common_chat_msg_diff &d) {
  json delta = json::object();
  if (!d.reasoning_content_delta.empty())
    delta["reasoning_content"] = d.reasoning_content_delta;
  if (!d.content_delta.empty())
    delta["content"] = d.content_delta;
  if (d.tool_call_index != std::string::npos) {
    json call = {{"index", d.tool_call_index}};
    if (!d.tool_call_delta.id.empty()) {
      call["id"] = d.tool_call_delta.id;
      call["type"] = "function";
    }
    json fn = json::object();
    if (!d.tool_call_delta.name.empty())
      fn["name"] = d.tool_call_delta.name;
    if (!d.tool_call_delta.arguments.empty())
      fn["arguments"] = d.tool_call_delta.arguments;
    if (!fn.empty())
      call["function"] = fn;
    delta["tool_calls"] = json::array({call});
  }
  return delta;
}

int up_parser_feed(up_parser_t *p, const char *text, size_t len,
                   bool partial, char **msg_json, char **deltas_json,
                   char *err, size_t errlen) {
  if (msg_json != nullptr)
    *msg_json = nullptr;
  if (deltas_json != nullptr)
    *deltas_json = nullptr;
  return guard(err, errlen, [&] {
    p->text.append(text, len);
    std::vector<common_chat_msg_diff> diffs;
    common_chat_msg next = common_chat_parse(p->text, partial, p->params);
    if (!next.empty()) {
      next.set_tool_call_ids(p->ids, random_id);
      diffs = common_chat_msg_diff::compute_diffs(p->msg, next);
      p->msg = std::move(next);
    }
    json all = json::array();
    for (const auto &diff : diffs)
      all.push_back(delta_of(diff));
    char *m = nullptr, *d = nullptr;
    try {
      if (msg_json != nullptr)
        give(p->msg.to_json_oaicompat().dump_safe(), &m);
      if (deltas_json != nullptr)
        give(all.dump_safe(), &d);
    } catch (...) {
      free(m);
      throw;
    }
    if (msg_json != nullptr)
      *msg_json = m;
    if (deltas_json != nullptr)
      *deltas_json = d;
    return 0;
  });
}

int up_chat_parse(const char *parser_json, const char *text, size_t len,
                  bool partial, char **msg_json, char *err, size_t errlen) {
  up_parser_t *p;
  *msg_json = nullptr;
  if (up_parser_new(&p, parser_json, err, errlen) != 0)
    return -1;
  int rc = up_parser_feed(p, text, len, partial, msg_json, nullptr, err,
                          errlen);
  up_parser_free(p);
  return rc;
}

/* ---- Grammars ---------------------------------------------------------- */

int up_json_schema_grammar(const char *schema_json, char **gbnf, char *err,
                           size_t errlen) {
  *gbnf = nullptr;
  return guard(err, errlen, [&] {
    json schema = parse(schema_json, "a JSON schema");
    try {
      return give(json_schema_to_grammar(schema), gbnf);
    } catch (const std::bad_alloc &) {
      throw;
    } catch (const std::exception &e) {
      throw bad(std::string("\"json_schema\": ") + e.what());
    }
  });
}
