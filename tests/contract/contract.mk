# The contract, proto/openapi.yaml: validated by two third-party validators
# (Redocly CLI's lint with tests/contract/redocly.yaml, and
# @apidevtools/swagger-parser against the OpenAPI 3.0 schema), then the real
# daemon's answers checked against it (tests/contract/contract_test.mjs:
# every vector replayed and every error of every route probed, each answer's
# status, headers, Content-Type and body validated with Ajv against the
# dereferenced document). `make check` runs it.
#
# The validators are npm packages at exact versions (package.json and
# package-lock.json here), installed by `npm ci` into
# tests/contract/node_modules (git-ignored) when the lock file changes. Needs
# Node.js >= 18.17 and npm (bookworm's nodejs 18.20 and npm 9 will do; deps.sh
# installs them when there is no node on PATH) and the npm registry for the
# first install.

CONTRACT_DIR   := tests/contract
CONTRACT_STAMP := $(CONTRACT_DIR)/node_modules/.installed
CONTRACT_ENV   := REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
                  NO_UPDATE_NOTIFIER=1

.PHONY: test-contract contract-deps contract-lint

$(CONTRACT_STAMP): $(CONTRACT_DIR)/package.json $(CONTRACT_DIR)/package-lock.json
	@deploy/deps.sh node
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 18 || (a === 18 && b >= 17) ? 0 : 1)' || \
	  { echo "test-contract needs Node.js >= 18.17, not $$(node --version)"; exit 1; }
	@echo "== npm ci in $(CONTRACT_DIR) (versions pinned by package-lock.json)"
	@npm ci --prefix $(CONTRACT_DIR) --no-audit --no-fund --loglevel=error
	@touch $@

contract-deps: $(CONTRACT_STAMP)

# The document alone: no daemon needed.
contract-lint: $(CONTRACT_STAMP)
	@$(CONTRACT_ENV) $(CONTRACT_DIR)/node_modules/.bin/redocly lint \
	  --config $(CONTRACT_DIR)/redocly.yaml --format=stylish proto/openapi.yaml \
	  > $(CONTRACT_DIR)/node_modules/.redocly.log 2>&1 || \
	  { grep -v '[║╔╚]' $(CONTRACT_DIR)/node_modules/.redocly.log; \
	    echo "redocly lint: proto/openapi.yaml has problems"; exit 1; }
	@echo "redocly lint $$(node -p 'require("./$(CONTRACT_DIR)/node_modules/@redocly/cli/package.json").version'): proto/openapi.yaml is valid, no problems (recommended-strict rules)"
	@node $(CONTRACT_DIR)/validate_doc.mjs proto/openapi.yaml
	@$(CONTRACT_ENV) $(CONTRACT_DIR)/node_modules/.bin/redocly lint \
	  --config $(CONTRACT_DIR)/redocly-serve.yaml --format=stylish \
	  deploy/llama/openapi.yaml > $(CONTRACT_DIR)/node_modules/.redocly.log 2>&1 || \
	  { grep -v '[║╔╚]' $(CONTRACT_DIR)/node_modules/.redocly.log; \
	    echo "redocly lint: deploy/llama/openapi.yaml has problems"; exit 1; }
	@echo "redocly lint: deploy/llama/openapi.yaml (evictd-llama serve's API) is valid, no problems"
	@node $(CONTRACT_DIR)/validate_doc.mjs deploy/llama/openapi.yaml

test-contract: contract-lint $(B)/evictd
	@node $(CONTRACT_DIR)/contract_test.mjs $(B)/evictd

test-more:: test-contract
