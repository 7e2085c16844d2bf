/* Anthropic's Messages API, its requests (anthropic.c answers them): the
 * body as the OpenAI chat request render_apply renders, each block checked,
 * what serve cannot honour refused with a sentence that says where. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api/anthropic_in.h"

/* Blocks serve cannot take: named, so that the refusal says which. */
static const char *const unsupported_blocks[] = {
    "image", "document", "redacted_thinking", "search_result",
    "server_tool_use", "web_search_tool_result", "container_upload",
    "mcp_tool_use", "mcp_tool_result", NULL};

static int unsupported_block(fields_t *f, const char *field, const char *at,
                             const char *type) {
  for (size_t i = 0; unsupported_blocks[i] != NULL; i++)
    if (strcmp(type, unsupported_blocks[i]) == 0)
      return field_bad(f, field, "%s: \"%s\" blocks are not supported by this "
                       "server: it would change the answer, so it is refused "
                       "rather than ignored", at, type);
  return field_bad(f, field, "%s: a content block's \"type\" must be \"text\", "
                   "\"thinking\", \"tool_use\" or \"tool_result\"", at);
}

/* llama-server's: Claude Code's system prompt begins with a line whose cch=
 * stamp changes with every request; the model has no use for it, and it
 * would keep a conversation from continuing the parked one (cache_prompt),
 * so its five characters are made the same each time. */
static void billing_header(char *s) {
  static const char head[] = "x-anthropic-billing-header:";
  if (strncmp(s, head, sizeof(head) - 1) != 0)
    return;
  char *cch = strstr(s + sizeof(head) - 1, "cch=");
  if (cch != NULL && strlen(cch + 4) > 5 && cch[9] == ';')
    memset(cch + 4, 'f', 5);
}

/* A content that is a string or a list of text blocks into buf, the
 * blocks joined with new lines (as common joins text parts for a template
 * of plain strings); at names it in a refusal. 0, or -1 with f set. */
static int text_of(fields_t *f, const char *field, const char *at,
                   json_t *content, evd_buf_t *buf) {
  if (json_is_string(content)) {
    evd_buf_add(buf, json_string_value(content), json_string_length(content));
    return 0;
  }
  if (!json_is_array(content))
    return field_bad(f, field, "%s must be a string or a list of text blocks",
                     at);
  size_t i;
  json_t *b;
  json_array_foreach(content, i, b) {
    json_t *type = json_object_get(b, "type"), *text = json_object_get(b,
                                                                       "text");
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    char where[96];
    snprintf(where, sizeof(where), "%s.%zu", at, i);
    if (strcmp(ty, "text") != 0)
      return unsupported_block(f, field, where, ty);
    if (!json_is_string(text))
      return field_bad(f, field, "%s: a text block needs \"text\": a string",
                       where);
    if (i > 0)
      evd_buf_chr(buf, '\n');
    evd_buf_add(buf, json_string_value(text), json_string_length(text));
  }
  return 0;
}

/* Appends {"role", "content": buf's text} to msgs and empties buf. */
static void push_text(json_t *msgs, const char *role, evd_buf_t *buf) {
  json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", role,
                                        "content", buf->data ? buf->data : "",
                                        buf->len));
  buf->len = 0;
}

/* The system prompt, a string or text blocks, as the first message. */
static int convert_system(fields_t *f, json_t *system, json_t *msgs) {
  if (system == NULL || json_is_null(system))
    return 0;
  evd_buf_t buf;
  evd_buf_init(&buf);
  int rc = text_of(f, "system", "system", system, &buf);
  if (rc == 0) {
    evd_buf_chr(&buf, '\0');
    if (buf.oom)
      rc = field_bad(f, NULL, "out of memory");
  }
  if (rc == 0) {
    billing_header(buf.data);
    buf.len--;
    push_text(msgs, "system", &buf);
  }
  evd_buf_free(&buf);
  return rc;
}

/* An assistant's tool_use block as OpenAI's tool call, into calls. */
static int tool_use(fields_t *f, const char *at, json_t *b, json_t *calls) {
  json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"),
         *input = json_object_get(b, "input");
  if (json_string_length(id) == 0 || json_string_length(name) == 0 ||
      !json_is_object(input))
    return field_bad(f, "messages", "%s: a tool_use block needs \"id\" and "
                     "\"name\" (strings) and \"input\" (an object)", at);
  char *args = json_dumps(input, JSON_COMPACT);
  if (args == NULL)
    return field_bad(f, NULL, "out of memory");
  json_array_append_new(calls, json_pack(
      "{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function",
      "name", name, "arguments", args));
  free(args);
  return 0;
}

/* A user's tool_result block as OpenAI's tool message, into msgs. */
static int tool_result(fields_t *f, const char *at, json_t *b, json_t *msgs) {
  json_t *id = json_object_get(b, "tool_use_id");
  json_t *content = json_object_get(b, "content");
  json_t *err = json_object_get(b, "is_error");
  if (json_string_length(id) == 0)
    return field_bad(f, "messages", "%s: a tool_result block needs "
                     "\"tool_use_id\": a string", at);
  if (err != NULL && !json_is_boolean(err) && !json_is_null(err))
    return field_bad(f, "messages", "%s: \"is_error\" must be true or false",
                     at);
  evd_buf_t buf;
  evd_buf_init(&buf);
  char where[112];
  snprintf(where, sizeof(where), "%s.content", at);
  int rc = content == NULL || json_is_null(content)
               ? 0 : text_of(f, "messages", where, content, &buf);
  if (rc == 0)
    json_array_append_new(msgs, json_pack(
        "{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", id, "content",
        buf.data ? buf.data : "", buf.len));
  evd_buf_free(&buf);
  return rc;
}

/* Message i, Anthropic's, as OpenAI's messages appended to msgs: a user's
 * text as a user message and its tool results as tool messages, in their
 * order; an assistant's text, thinking (its reasoning_content, the
 * blocks' joined, as llama-server's) and tool calls as one message. */
static int convert_message(fields_t *f, size_t i, json_t *m, json_t *msgs) {
  json_t *role = json_object_get(m, "role"), *content = json_object_get(m,
                                                                        "content");
  const char *r = json_is_string(role) ? json_string_value(role) : "";
  bool user = strcmp(r, "user") == 0, assistant = strcmp(r, "assistant") == 0;
  char at[64];
  snprintf(at, sizeof(at), "messages.%zu", i);
  if (!user && !assistant)
    return field_bad(f, "messages", "%s: \"role\" must be \"user\" or "
                     "\"assistant\"", at);
  if (json_is_string(content)) {
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", r, "content",
                                          content));
    return 0;
  }
  if (!json_is_array(content) || json_array_size(content) == 0)
    return field_bad(f, "messages", "%s: \"content\" must be a string or a "
                     "list of content blocks (text, tool_use, tool_result)",
                     at);
  evd_buf_t text, reasoning;
  evd_buf_init(&text);
  evd_buf_init(&reasoning);
  json_t *calls = json_array();
  bool any_text = false;
  int rc = 0;
  size_t k;
  json_t *b;
  json_array_foreach(content, k, b) {
    json_t *type = json_object_get(b, "type"), *t = json_object_get(b, "text");
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    char where[96];
    snprintf(where, sizeof(where), "%s.content.%zu", at, k);
    if (strcmp(ty, "text") == 0) {
      if (!json_is_string(t)) {
        rc = field_bad(f, "messages", "%s: a text block needs \"text\": a "
                       "string", where);
        break;
      }
      if (any_text)
        evd_buf_chr(&text, '\n');
      evd_buf_add(&text, json_string_value(t), json_string_length(t));
      any_text = true;
    } else if (strcmp(ty, "thinking") == 0 && assistant) {
      json_t *th = json_object_get(b, "thinking");
      if (!json_is_string(th)) {
        rc = field_bad(f, "messages", "%s: a thinking block needs "
                       "\"thinking\": a string", where);
        break;
      }
      evd_buf_add(&reasoning, json_string_value(th), json_string_length(th));
    } else if (strcmp(ty, "tool_use") == 0 && assistant) {
      if ((rc = tool_use(f, where, b, calls)) != 0)
        break;
    } else if (strcmp(ty, "tool_result") == 0 && user) {
      /* The user's text so far goes before the results that follow it. */
      if (any_text)
        push_text(msgs, "user", &text);
      any_text = false;
      if ((rc = tool_result(f, where, b, msgs)) != 0)
        break;
    } else if (strcmp(ty, "tool_use") == 0 || strcmp(ty, "tool_result") == 0 ||
               strcmp(ty, "thinking") == 0) {
      rc = field_bad(f, "messages", "%s: a %s block belongs in %s message",
                     where, ty, user ? "an assistant's" : "a user's");
      break;
    } else {
      rc = unsupported_block(f, "messages", where, ty);
      break;
    }
  }
  if (rc == 0 && (text.oom || reasoning.oom))
    rc = field_bad(f, NULL, "out of memory");
  if (rc == 0 && assistant) {
    json_t *msg = json_pack("{s:s,s:s%}", "role", "assistant", "content",
                            text.data ? text.data : "", text.len);
    if (json_array_size(calls) > 0)
      json_object_set(msg, "tool_calls", calls);
    if (reasoning.len > 0)
      json_object_set_new(msg, "reasoning_content", json_stringn(
          reasoning.data, reasoning.len));
    json_array_append_new(msgs, msg);
  } else if (rc == 0 && any_text) {
    push_text(msgs, "user", &text);
  }
  json_decref(calls);
  evd_buf_free(&text);
  evd_buf_free(&reasoning);
  return rc;
}

/* tools: [{name, description?, input_schema}] as OpenAI's functions. */
static int convert_tools(fields_t *f, json_t *tools, json_t *chat) {
  if (tools == NULL || json_is_null(tools))
    return 0;
  if (!json_is_array(tools))
    return field_bad(f, "tools", "\"tools\" must be a list of {\"name\", "
                     "\"description\", \"input_schema\"}");
  json_t *out = json_array();
  size_t i;
  json_t *tool;
  json_array_foreach(tools, i, tool) {
    json_t *type = json_object_get(tool, "type");
    json_t *name = json_object_get(tool, "name");
    json_t *desc = json_object_get(tool, "description");
    json_t *schema = json_object_get(tool, "input_schema");
    if (type != NULL && !json_is_null(type) &&
        !(json_is_string(type) &&
          strcmp(json_string_value(type), "custom") == 0)) {
      json_decref(out);
      return field_bad(f, "tools", "tools.%zu: Anthropic's server tools "
                       "(\"type\" %s) are not supported by this server: only "
                       "tools of "
                       "your own (name, description, input_schema)", i,
                       json_is_string(type) ? "other than \"custom\"" : "");
    }
    if (json_string_length(name) == 0 || !json_is_object(schema) ||
        (desc != NULL && !json_is_null(desc) && !json_is_string(desc))) {
      json_decref(out);
      return field_bad(f, "tools", "tools.%zu needs \"name\" (a string) and "
                       "\"input_schema\" (a JSON schema object); "
                       "\"description\", when given, is a string", i);
    }
    json_array_append_new(out, json_pack(
        "{s:s,s:{s:O,s:s,s:O}}", "type", "function", "function", "name",
        name, "description", json_is_string(desc) ? json_string_value(desc)
                                                  : "",
        "parameters", schema));
  }
  json_object_set_new(chat, "tools", out);
  return 0;
}

/* tool_choice: {type: auto|any|tool|none, name, disable_parallel_tool_use}
 * as OpenAI's tool_choice and parallel_tool_calls. */
static int convert_choice(fields_t *f, json_t *tc, json_t *chat) {
  if (tc == NULL || json_is_null(tc))
    return 0;
  json_t *type = json_object_get(tc, "type"), *name = json_object_get(tc,
                                                                      "name");
  json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
  const char *ty = json_is_string(type) ? json_string_value(type) : "";
  bool has_tools = json_array_size(json_object_get(chat, "tools")) > 0;
  if (!json_is_object(tc) || (dp != NULL && !json_is_boolean(dp) &&
                              !json_is_null(dp)))
    return field_bad(f, "tool_choice", "\"tool_choice\" must be {\"type\": "
                     "\"auto\"|\"any\"|\"tool\"|\"none\"}, with \"name\" for "
                     "\"tool\" and \"disable_parallel_tool_use\" true or "
                     "false");
  if (strcmp(ty, "auto") == 0) {
    json_object_set_new(chat, "tool_choice", json_string("auto"));
  } else if (strcmp(ty, "none") == 0) {
    json_object_set_new(chat, "tool_choice", json_string("none"));
  } else if (strcmp(ty, "any") == 0 && has_tools) {
    json_object_set_new(chat, "tool_choice", json_string("required"));
  } else if (strcmp(ty, "tool") == 0 && has_tools &&
             json_string_length(name) > 0) {
    /* That tool alone, and required (upstream/templates.h). */
    json_object_set_new(chat, "tool_choice", json_pack(
        "{s:s,s:{s:O}}", "type", "function", "function", "name", name));
  } else {
    return field_bad(f, "tool_choice", "\"tool_choice\" must be {\"type\": "
                     "\"auto\"|\"any\"|\"tool\"|\"none\"}; \"any\" and "
                     "\"tool\" need \"tools\", and \"tool\" a \"name\"");
  }
  if (json_is_true(dp))
    json_object_set_new(chat, "parallel_tool_calls", json_false());
  return 0;
}

/* Fields that would change the answer and that serve does not honour. */
static const unhonoured_t unhonoured[] = {
    {"container", 0, NULL},          {"mcp_servers", 0, NULL},
    {"context_management", 0, NULL}, {"output_format", 0, NULL},
    {NULL, 0, NULL}};

int anthropic_convert(fields_t *f, json_t **chat) {
  json_t *body = f->body;
  json_t *model = json_object_get(body, "model");
  json_t *messages = json_object_get(body, "messages");
  json_t *thinking = json_object_get(body, "thinking");
  json_t *meta = json_object_get(body, "metadata");
  json_t *kwargs = json_object_get(body, "chat_template_kwargs");
  json_t *think_type = json_object_get(thinking, "type");
  json_t *budget = json_object_get(thinking, "budget_tokens");
  const char *tt = json_is_string(think_type) ? json_string_value(think_type)
                                              : "";
  bool think = strcmp(tt, "enabled") == 0;
  *chat = NULL;
  if (!json_is_string(model))
    return field_bad(f, "model", "\"model\" is required: a string (one model "
                     "is served: any name will do)");
  /* None is llama-server's permissive reading: the template's generation
   * prompt alone. */
  size_t n = json_array_size(messages);
  if (!json_is_array(messages) || n > 4096)
    return field_bad(f, "messages", "\"messages\" is required: a list of up "
                     "to 4096 messages {\"role\": \"user\"|\"assistant\", "
                     "\"content\"}");
  if (thinking != NULL && !json_is_null(thinking) &&
      (!json_is_object(thinking) ||
       (!think && strcmp(tt, "disabled") != 0) ||
       (budget != NULL && !json_is_null(budget) &&
        (!json_is_integer(budget) || json_integer_value(budget) < 0 ||
         json_integer_value(budget) > INT32_MAX))))
    return field_bad(f, "thinking", "\"thinking\" must be {\"type\": "
                     "\"enabled\", \"budget_tokens\": N} (N a whole number "
                     "from 0) or {\"type\": \"disabled\"}");
  if (meta != NULL && !json_is_null(meta) &&
      (!json_is_object(meta) ||
       (json_object_get(meta, "user_id") != NULL &&
        !json_is_string(json_object_get(meta, "user_id")) &&
        !json_is_null(json_object_get(meta, "user_id")))))
    return field_bad(f, "metadata", "\"metadata\" must be an object whose "
                     "\"user_id\" is a string");
  if (kwargs != NULL && !json_is_null(kwargs) && !json_is_object(kwargs))
    return field_bad(f, "chat_template_kwargs", "\"chat_template_kwargs\" must "
                     "be an object");
  if (field_unhonoured(f, unhonoured) != 0)
    return -1;
  /* No thinking asked for: a template with a reasoning block is told so,
   * and what the model writes stays text. Thinking asked for, as
   * llama-server: the template's thinking on, what the model thinks read
   * apart (thinking blocks), within budget_tokens (10000 when not given,
   * as there; the reasoning budget of upstream/templates.h). */
  json_t *c = json_pack("{s:[],s:s,s:{s:b}}", "messages", "reasoning_format",
                        think ? "deepseek" : "none", "chat_template_kwargs",
                        "enable_thinking", think);
  if (c == NULL)
    return field_bad(f, NULL, "out of memory");
  if (think)
    json_object_set_new(c, "reasoning_budget_tokens", json_integer(
        json_is_integer(budget) ? json_integer_value(budget) : 10000));
  json_t *msgs = json_object_get(c, "messages");
  if (json_is_object(kwargs))
    json_object_update(json_object_get(c, "chat_template_kwargs"), kwargs);
  int rc = convert_system(f, json_object_get(body, "system"), msgs);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    json_t *m = json_array_get(messages, i);
    rc = json_is_object(m) ? convert_message(f, i, m, msgs)
                           : field_bad(f, "messages", "messages.%zu must be an "
                                       "object {\"role\", \"content\"}", i);
  }
  if (rc == 0)
    rc = convert_tools(f, json_object_get(body, "tools"), c);
  if (rc == 0)
    rc = convert_choice(f, json_object_get(body, "tool_choice"), c);
  if (rc != 0) {
    json_decref(c);
    return -1;
  }
  *chat = c;
  return 0;
}
