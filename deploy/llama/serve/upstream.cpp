/* upstream.h over llama.cpp's common library: glue only. Each function
 * turns JSON into common's structures, calls common as llama-server calls
 * it (tools/server: oaicompat_chat_params_parse, the completion schema's
 * fields, task_result_state, populate_token_probs) and turns the result
 * back into JSON; no C++ exception leaves this file. */
#include "serve/upstream.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "chat.h"
#include "common.h"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "log.h"
#include "sampling.h"

namespace {

typedef common_json json;

/* A request's fault, answered as it is worded (a 400 upstream). */
struct bad : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

int fail(char *err, size_t errlen, const char *what) {
  if (err != nullptr && errlen > 0)
    snprintf(err, errlen, "%s", what);
  return -1;
}

/* Runs fn, which returns 0 or -1; every exception becomes -1 with its
 * sentence, so none crosses into C. */
template <typename F> int guard(char *err, size_t errlen, F fn) {
  try {
    return fn();
  } catch (const std::bad_alloc &) {
    return fail(err, errlen, "out of memory");
  } catch (const std::exception &e) {
    return fail(err, errlen, e.what());
  } catch (...) {
    return fail(err, errlen, "llama.cpp failed for an unknown reason");
  }
}

/* s as a malloc'd C string into *out. */
int give(const std::string &s, char **out) {
  *out = static_cast<char *>(malloc(s.size() + 1));
  if (*out == nullptr)
    throw std::bad_alloc();
  memcpy(*out, s.c_str(), s.size() + 1);
  return 0;
}

json parse(const char *text, const char *what) {
  if (text == nullptr)
    throw bad(std::string(what) + " is missing");
  json j = json::parse_no_throw(text);
  if (j.is_discarded() || !j.is_object())
    throw bad(std::string(what) + " must be a JSON object");
  return j;
}

/* The field when it is there and not null: llama-server treats null as
 * absent, so that a client may ask for the default. */
const json *field(const json &body, const char *name) {
  return body.contains(name) && !body.at(name).is_null() ? &body.at(name)
                                                          : nullptr;
}

std::string quoted(const char *name) { return std::string("\"") + name + "\""; }

std::string shortest(double d) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.10g", d);
  return buf;
}

std::string str(const json &body, const char *name, const std::string &def) {
  const json *v = field(body, name);
  if (v == nullptr)
    return def;
  if (!v->is_string())
    throw bad(quoted(name) + " must be a string");
  return v->get<std::string>();
}

bool flag(const json &body, const char *name, bool def) {
  const json *v = field(body, name);
  if (v == nullptr)
    return def;
  if (!v->is_boolean())
    throw bad(quoted(name) + " must be true or false");
  return v->get<bool>();
}

/* A number within [lo, hi]: clamped into it where llama-server clamps
 * (its soft limits), refused outside it where it refuses. */
template <typename T>
void number(const json &body, const char *name, T &dst, double lo, double hi,
            bool clamp) {
  const json *v = field(body, name);
  if (v == nullptr)
    return;
  if (!v->is_number())
    throw bad(quoted(name) + " must be a number");
  double d = v->get<double>();
  if (std::is_integral<T>::value && d != std::floor(d))
    throw bad(quoted(name) + " must be an integer");
  if (d < lo || d > hi) {
    if (!clamp)
      throw bad(quoted(name) + " must be between " + shortest(lo) +
                " and " + shortest(hi));
    d = std::max(lo, std::min(hi, d));
  }
  dst = static_cast<T>(d);
}

const double BIG = std::numeric_limits<int32_t>::max();
const double INF = std::numeric_limits<double>::infinity();

std::vector<llama_token> tokens_of(const llama_vocab *vocab,
                                   const std::string &text) {
  return common_tokenize(vocab, text, false, true);
}

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

void up_init(bool debug) {
  common_log_set_verbosity_thold(debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN);
}

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
 * all is llama-server's to take too: chat.c says which routes want some
 * (chat_apply_min). */
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

/* ---- Sampling ---------------------------------------------------------- */

struct up_sampler_s {
  const llama_model *model = nullptr;
  common_params_sampling params; /* as applied, for the settings */
  bool post = false;             /* post_sampling_probs */
  common_sampler *smpl = nullptr;
  std::vector<llama_token_data> cur; /* the raw softmax's room */
  ~up_sampler_s() { common_sampler_free(smpl); }
};

/* logit_bias in both of llama-server's forms: [[token, bias], ...] with a
 * token id or a text (each of its tokens), and OpenAI's {"id": bias}; a
 * bias of false bans. Unlike llama-server, which skips what it cannot
 * read, a malformed entry or an id outside the vocabulary is refused. */
static void logit_bias_of(const json &v, const llama_vocab *vocab,
                          std::vector<llama_logit_bias> &out) {
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const char *why = "\"logit_bias\" must be [[token, bias], ...] (a token "
                    "id or a text) or {\"token id\": bias}, each bias a "
                    "number or false";
  auto bias_of = [&](const json &b) -> float {
    if (b.is_number())
      return b.get<float>();
    if (b.is_boolean() && !b.get<bool>())
      return -INFINITY;
    throw bad(why);
  };
  auto add_id = [&](long long id, float bias) {
    if (id < 0 || id >= n_vocab)
      throw bad("\"logit_bias\" names token " + std::to_string(id) +
                ", outside the vocabulary (0 to " +
                std::to_string(n_vocab - 1) + ")");
    out.push_back({static_cast<llama_token>(id), bias});
  };
  auto add_text = [&](const std::string &text, float bias) {
    for (llama_token tok : common_tokenize(vocab, text, false))
      out.push_back({tok, bias});
  };
  if (v.is_array()) {
    for (const auto &el : v) {
      if (!el.is_array() || el.size() != 2)
        throw bad(why);
      float bias = bias_of(el.at(1));
      if (el.at(0).is_number_integer())
        add_id(el.at(0).get<long long>(), bias);
      else if (el.at(0).is_string())
        add_text(el.at(0).get<std::string>(), bias);
      else
        throw bad(why);
    }
  } else if (v.is_object()) {
    for (const auto &item : v.items()) {
      float bias = bias_of(item.value());
      char *end;
      long long id = strtoll(item.key().c_str(), &end, 10);
      if (!item.key().empty() && *end == '\0')
        add_id(id, bias);
      else
        add_text(item.key(), bias);
    }
  } else {
    throw bad(why);
  }
}

/* "samplers": names, or a string of llama.cpp's letters; common skips
 * what it does not know with a warning, here that is refused. */
static std::vector<common_sampler_type> samplers_of(const json &v) {
  std::vector<common_sampler_type> out;
  std::vector<std::string> names;
  if (v.is_string()) {
    for (char c : v.get<std::string>()) {
      auto one = common_sampler_types_from_chars(std::string(1, c));
      if (one.empty())
        throw bad(std::string("\"samplers\": llama.cpp has no sampler '") +
                  c + "'");
      out.push_back(one[0]);
    }
    return out;
  }
  if (!v.is_array())
    throw bad("\"samplers\" must be a list of names or a string of letters");
  for (const auto &name : v) {
    if (!name.is_string())
      throw bad("\"samplers\" must be a list of names or a string of "
                "letters");
    auto one = common_sampler_types_from_names({name.get<std::string>()});
    if (one.empty())
      throw bad("\"samplers\": llama.cpp has no sampler named \"" +
                name.get<std::string>() + "\"");
    out.push_back(one[0]);
  }
  return out;
}

/* The grammar, its triggers and the tokens they need, as llama-server's
 * completion fields read them (server-schema.cpp), in its order:
 * preserved_tokens before the triggers that must be among them. */
static void grammar_of(const json &body, const llama_vocab *vocab,
                       common_params_sampling &sp) {
  if (const json *v = field(body, "preserved_tokens")) {
    if (!v->is_array())
      throw bad("\"preserved_tokens\" must be a list of strings");
    for (const auto &t : *v) {
      if (!t.is_string())
        throw bad("\"preserved_tokens\" must be a list of strings");
      auto ids = tokens_of(vocab, t.get<std::string>());
      if (ids.size() == 1)
        sp.preserved_tokens.insert(ids[0]);
    }
  }
  /* grammar wins over json_schema when both are there: a chat's grammar
   * (up_chat_apply's) already holds the schema. An empty grammar is none
   * (llama-server would let it hide the schema). */
  const json *g = field(body, "grammar");
  bool grammar = g != nullptr &&
                 !(g->is_string() && g->get<std::string>().empty());
  if (field(body, "json_schema") && !grammar) {
    try {
      sp.grammar = {COMMON_GRAMMAR_TYPE_OUTPUT_FORMAT,
                    json_schema_to_grammar(body.at("json_schema"))};
    } catch (const std::bad_alloc &) {
      throw;
    } catch (const std::exception &e) {
      throw bad(std::string("\"json_schema\": ") + e.what());
    }
  } else {
    std::string g = str(body, "grammar", "");
    if (g.compare(0, 11, "%llguidance") == 0)
      throw bad("\"grammar\": this llama.cpp is built without llguidance");
    if (!g.empty())
      sp.grammar = {str(body, "grammar_type", "") == "tool_calls"
                        ? COMMON_GRAMMAR_TYPE_TOOL_CALLS
                        : COMMON_GRAMMAR_TYPE_USER,
                    g};
  }
  sp.grammar_lazy = flag(body, "grammar_lazy", false);
  sp.generation_prompt = str(body, "generation_prompt", "");
  const char *why = "\"grammar_triggers\" must be a list of {\"type\": 0 "
                    "(token), 1 (word), 2 (pattern) or 3 (full pattern), "
                    "\"value\": string, \"token\": id (type 0)}";
  if (const json *v = field(body, "grammar_triggers")) {
    if (!v->is_array())
      throw bad(why);
    for (const auto &t : *v) {
      int type = -1;
      common_grammar_trigger tr;
      try {
        if (!t.is_object() || !field(t, "value") ||
            !field(t, "type"))
          throw bad(why);
        number(t, "type", type, 0, COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL,
               false);
        tr.value = str(t, "value", "");
        if (type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN && !field(t, "token"))
          throw bad(why);
        number(t, "token", tr.token, 0, llama_vocab_n_tokens(vocab) - 1,
               false);
      } catch (const bad &e) {
        throw bad(std::string("\"grammar_triggers\": ") + e.what());
      }
      tr.type = static_cast<common_grammar_trigger_type>(type);
      if (tr.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD) {
        /* A word that is one token triggers on that token, which must
         * then come out whole (llama-server's rule). */
        auto ids = tokens_of(vocab, tr.value);
        if (ids.size() == 1) {
          if (!sp.preserved_tokens.count(ids[0]))
            throw bad("\"grammar_triggers\": the trigger word \"" +
                      tr.value + "\" is one token, which must be among "
                      "\"preserved_tokens\"");
          tr.type = COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN;
          tr.token = ids[0];
        }
      }
      sp.grammar_triggers.push_back(tr);
    }
  }
  if (sp.grammar_lazy && !sp.grammar.grammar.empty() &&
      sp.grammar_triggers.empty())
    throw bad("\"grammar_lazy\" needs \"grammar_triggers\"");
}

/* The reasoning budget's tags (a chat with a reasoning block): with a
 * lazy grammar, common keeps the grammar out of the reasoning. */
static void budget_of(const json &body, const llama_vocab *vocab,
                      common_params_sampling &sp) {
  number(body, "reasoning_budget_tokens", sp.reasoning_budget_tokens, -1,
         BIG, false);
  std::string start = str(body, "reasoning_budget_start_tag", "");
  if (!start.empty())
    sp.reasoning_budget_start = tokens_of(vocab, start);
  std::vector<std::string> ends;
  if (const json *v = field(body, "reasoning_budget_end_tags")) {
    if (!v->is_array())
      throw bad("\"reasoning_budget_end_tags\" must be a list of strings");
    for (const auto &e : *v) {
      if (!e.is_string())
        throw bad("\"reasoning_budget_end_tags\" must be a list of strings");
      ends.push_back(e.get<std::string>());
    }
  }
  for (const auto &e : ends)
    if (!e.empty())
      sp.reasoning_budget_end.push_back(tokens_of(vocab, e));
  if (!sp.reasoning_budget_end.empty()) {
    sp.reasoning_budget_forced = tokens_of(
        vocab, str(body, "reasoning_budget_message", ""));
    const auto &end = sp.reasoning_budget_end.front();
    sp.reasoning_budget_forced.insert(sp.reasoning_budget_forced.end(),
                                      end.begin(), end.end());
  }
}

int up_sampler_new(up_sampler_t **out, const struct llama_model *model,
                   const char *params_json, char *err, size_t errlen) {
  *out = nullptr;
  return guard(err, errlen, [&] {
    json body = parse(params_json, "the sampling parameters");
    const llama_vocab *vocab = llama_model_get_vocab(model);
    auto s = std::make_unique<up_sampler_s>();
    s->model = model;
    common_params_sampling &sp = s->params;
    /* Limits as llama-server's completion schema has them: clamped
     * (true) or refused (false). */
    number(body, "top_k", sp.top_k, 0, BIG, true);
    number(body, "top_p", sp.top_p, 0, 1, true);
    number(body, "min_p", sp.min_p, 0, 1, true);
    number(body, "top_n_sigma", sp.top_n_sigma, -INF, INF, true);
    number(body, "xtc_probability", sp.xtc_probability, 0, 1, true);
    number(body, "xtc_threshold", sp.xtc_threshold, 0, 1, true);
    number(body, "typical_p", sp.typ_p, -INF, INF, true);
    number(body, "temperature", sp.temp, 0, INF, true);
    number(body, "dynatemp_range", sp.dynatemp_range, -INF, INF, true);
    number(body, "dynatemp_exponent", sp.dynatemp_exponent, -INF, INF, true);
    number(body, "repeat_last_n", sp.penalty_last_n, 0, BIG, false);
    number(body, "repeat_penalty", sp.penalty_repeat, -INF, INF, true);
    if (!(sp.penalty_repeat > 0))
      throw bad("\"repeat_penalty\" must be greater than 0");
    number(body, "frequency_penalty", sp.penalty_freq, -INF, INF, true);
    number(body, "presence_penalty", sp.penalty_present, -INF, INF, true);
    number(body, "dry_multiplier", sp.dry_multiplier, -INF, INF, true);
    float base = sp.dry_base;
    number(body, "dry_base", base, -INF, INF, true);
    if (base >= 1) /* below 1: llama-server's default */
      sp.dry_base = base;
    number(body, "dry_allowed_length", sp.dry_allowed_length, 0, BIG, false);
    number(body, "dry_penalty_last_n", sp.dry_penalty_last_n, 0, BIG, false);
    number(body, "mirostat", sp.mirostat, 0, 2, true);
    number(body, "mirostat_tau", sp.mirostat_tau, -INF, INF, true);
    number(body, "mirostat_eta", sp.mirostat_eta, -INF, INF, true);
    number(body, "adaptive_target", sp.adaptive_target, -INF, 1, true);
    number(body, "adaptive_decay", sp.adaptive_decay, 0, 0.99, false);
    if (const json *v = field(body, "seed")) {
      if (!v->is_number_integer())
        throw bad("\"seed\" must be an integer");
      sp.seed = static_cast<uint32_t>(v->get<long long>());
    }
    if (field(body, "n_probs"))
      number(body, "n_probs", sp.n_probs, 0, BIG, false);
    else if (field(body, "logprobs") && body.at("logprobs").is_number())
      number(body, "logprobs", sp.n_probs, 0, BIG, false);
    number(body, "min_keep", sp.min_keep, 0, BIG, false);
    s->post = flag(body, "post_sampling_probs", false);
    if (const json *v = field(body, "dry_sequence_breakers")) {
      if (!v->is_array() || v->empty())
        throw bad("\"dry_sequence_breakers\" must be a non-empty list of "
                  "strings");
      sp.dry_sequence_breakers.clear();
      for (const auto &b : *v) {
        if (!b.is_string())
          throw bad("\"dry_sequence_breakers\" must be a non-empty list of "
                    "strings");
        sp.dry_sequence_breakers.push_back(b.get<std::string>());
      }
    }
    if (const json *v = field(body, "samplers"))
      sp.samplers = samplers_of(*v);
    grammar_of(body, vocab, sp);
    budget_of(body, vocab, sp);
    if (const json *v = field(body, "logit_bias"))
      logit_bias_of(*v, vocab, sp.logit_bias);
    sp.ignore_eos = flag(body, "ignore_eos", false);
    if (sp.ignore_eos)
      for (llama_token t = 0; t < llama_vocab_n_tokens(vocab); t++)
        if (llama_vocab_is_eog(vocab, t))
          sp.logit_bias.push_back({t, -INFINITY});
    /* The grammar is parsed once alone first: common_sampler_init throws
     * on one that does not parse after it made its chain, which then
     * leaks (AddressSanitizer found it). */
    const std::string &g = sp.grammar.grammar;
    if (!g.empty()) {
      llama_sampler *check = llama_sampler_init_grammar(vocab, g.c_str(),
                                                        "root");
      if (check == nullptr)
        throw bad("\"grammar\": llama.cpp cannot parse it (its log says "
                  "where)");
      llama_sampler_free(check);
    }
    /* No timings kept: nothing reads them, and each draw and accept
     * would read the clock twice for them. */
    sp.no_perf = true;
    s->smpl = common_sampler_init(model, sp);
    *out = s.release();
    return 0;
  });
}

void up_sampler_free(up_sampler_t *s) { delete s; }

int up_sampler_settings(const up_sampler_t *s, char **out_json, char *err,
                        size_t errlen) {
  *out_json = nullptr;
  return guard(err, errlen, [&] {
    common_params_sampling def;
    const common_params_sampling &sp = s != nullptr ? s->params : def;
    std::vector<std::string> samplers;
    for (auto type : sp.samplers)
      samplers.push_back(common_sampler_type_to_str(type));
    json bias = json::array(), triggers = json::array();
    for (const auto &b : sp.logit_bias)
      bias.push_back(json{{"bias", b.bias}, {"token", b.token}});
    for (const auto &tr : sp.grammar_triggers) {
      json one = {{"type", static_cast<int>(tr.type)}, {"value", tr.value}};
      if (tr.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN)
        one["token"] = static_cast<int>(tr.token);
      triggers.push_back(one);
    }
    std::vector<int> preserved(sp.preserved_tokens.begin(),
                               sp.preserved_tokens.end());
    json o = {
        {"seed", sp.seed},
        {"temperature", sp.temp},
        {"dynatemp_range", sp.dynatemp_range},
        {"dynatemp_exponent", sp.dynatemp_exponent},
        {"top_k", sp.top_k},
        {"top_p", sp.top_p},
        {"min_p", sp.min_p},
        {"top_n_sigma", sp.top_n_sigma},
        {"xtc_probability", sp.xtc_probability},
        {"xtc_threshold", sp.xtc_threshold},
        {"typical_p", sp.typ_p},
        {"repeat_last_n", sp.penalty_last_n},
        {"repeat_penalty", sp.penalty_repeat},
        {"presence_penalty", sp.penalty_present},
        {"frequency_penalty", sp.penalty_freq},
        {"dry_multiplier", sp.dry_multiplier},
        {"dry_base", sp.dry_base},
        {"dry_allowed_length", sp.dry_allowed_length},
        {"dry_penalty_last_n", sp.dry_penalty_last_n},
        {"dry_sequence_breakers", sp.dry_sequence_breakers},
        {"mirostat", sp.mirostat},
        {"mirostat_tau", sp.mirostat_tau},
        {"mirostat_eta", sp.mirostat_eta},
        {"adaptive_target", sp.adaptive_target},
        {"adaptive_decay", sp.adaptive_decay},
        {"ignore_eos", sp.ignore_eos},
        {"logit_bias", bias},
        {"n_probs", sp.n_probs},
        {"min_keep", sp.min_keep},
        {"grammar", sp.grammar.grammar},
        {"grammar_lazy", sp.grammar_lazy},
        {"grammar_triggers", triggers},
        {"preserved_tokens", preserved},
        {"samplers", samplers},
        {"post_sampling_probs", s != nullptr && s->post},
    };
    return give(o.dump_safe(), out_json);
  });
}

int up_sampler_accept(up_sampler_t *s, llama_token tok, bool accept_grammar,
                      char *err, size_t errlen) {
  return guard(err, errlen, [&] {
    if (tok < 0 || tok >= llama_vocab_n_tokens(llama_model_get_vocab(s->model)))
      throw bad("token " + std::to_string(tok) + " is outside the vocabulary");
    common_sampler_accept(s->smpl, tok, accept_grammar);
    return 0;
  });
}

int up_sampler_sample(up_sampler_t *s, struct llama_context *ctx,
                      int32_t idx, llama_token *tok, char *err,
                      size_t errlen) {
  return guard(err, errlen, [&] {
    /* common asserts (aborts) where llama.cpp has no logits: ask first. */
    if (llama_get_logits_ith(ctx, idx) == nullptr)
      throw std::runtime_error("llama.cpp has no logits at output " +
                               std::to_string(idx));
    *tok = common_sampler_sample(s->smpl, ctx, idx);
    /* The token drawn is one the chain and the grammar excluded only when
     * they excluded every one: nothing may follow. */
    llama_token_data_array *cur = common_sampler_get_candidates(s->smpl,
                                                                false);
    if (cur->selected >= 0 && static_cast<size_t>(cur->selected) < cur->size &&
        cur->data[cur->selected].logit == -INFINITY)
      return 1;
    return 0;
  });
}

int up_sampler_probs(up_sampler_t *s, struct llama_context *ctx, int32_t idx,
                     llama_token tok, up_prob_t *out, int n, float *p_tok,
                     char *err, size_t errlen) {
  *p_tok = 0;
  return guard(err, errlen, [&] {
    int k = 0;
    if (s->post) {
      /* The chain's candidates, sorted by the probabilities it drew
       * from; llama-server stops at the first 0. */
      llama_token_data_array *cur = common_sampler_get_candidates(s->smpl,
                                                                  true);
      for (size_t i = 0; i < cur->size; i++)
        if (cur->data[i].id == tok)
          *p_tok = cur->data[i].p;
      for (size_t i = 0; i < cur->size && k < n && cur->data[i].p > 0; i++)
        out[k++] = {cur->data[i].id, cur->data[i].p};
      return k;
    }
    /* The model's own distribution: the softmax of the raw logits. */
    const float *logits = llama_get_logits_ith(ctx, idx);
    if (logits == nullptr)
      throw std::runtime_error("llama.cpp has no logits at output " +
                               std::to_string(idx));
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(s->model));
    float top = *std::max_element(logits, logits + nv);
    double z = 0;
    for (int i = 0; i < nv; i++)
      z += std::exp(static_cast<double>(logits[i]) - top);
    s->cur.resize(nv);
    for (int i = 0; i < nv; i++)
      s->cur[i] = {i, logits[i],
                   static_cast<float>(std::exp(static_cast<double>(logits[i]) -
                                               top) / z)};
    if (tok >= 0 && tok < nv)
      *p_tok = s->cur[tok].p;
    k = std::max(0, std::min(n, nv));
    std::partial_sort(s->cur.begin(), s->cur.begin() + k, s->cur.end(),
                      [](const llama_token_data &a, const llama_token_data &b) {
                        return a.logit != b.logit ? a.logit > b.logit
                                                  : a.id < b.id;
                      });
    for (int i = 0; i < k; i++)
      out[i] = {s->cur[i].id, s->cur[i].p};
    return k;
  });
}
