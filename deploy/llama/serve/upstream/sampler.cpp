/* sampler.h over llama.cpp's common library: glue only. A request's
 * sampling fields under llama-server's names become common's
 * common_params_sampling as llama-server reads them (the completion
 * schema's fields), then common_sampler; the probabilities are
 * populate_token_probs's. No C++ exception leaves this file. */
#include "serve/upstream/sampler.h"

#include <string>
#include <vector>

#include "common.h"
#include "json-schema-to-grammar.h"
#include "sampling.h"
#include "serve/upstream/upstream.hpp"

using namespace up;

namespace {

std::vector<llama_token> tokens_of(const llama_vocab *vocab,
                                   const std::string &text) {
  return common_tokenize(vocab, text, false, true);
}

} // namespace

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
