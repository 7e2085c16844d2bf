# evictd-eval (server/eval/): the retained-attention evaluator, a shipped
# binary (`make install` puts it beside evictd), linked with the policy core
# and the modules the daemon shares (evictd-common.a: the JSON string
# writer, the SVG chart). Its tests, trace generator and benchmark are in
# tests/eval/eval.mk, which links EVAL_OBJ.

EVAL_SRC := $(filter-out server/eval/main.c,$(wildcard server/eval/*.c))
EVAL_OBJ := $(EVAL_SRC:server/eval/%.c=$(B)/obj/eval/%.o)
EVAL_HDR := $(wildcard server/eval/*.h) $(HEADERS)

BUILD_ALL += $(B)/evictd-eval

$(B)/obj/eval/%.o: server/eval/%.c $(EVAL_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/evictd-eval: $(B)/obj/eval/main.o $(EVAL_OBJ) $(B)/evictd-core.a \
                 $(B)/evictd-common.a
	$(CC) -o $@ $^ $(LDFLAGS) -lm
