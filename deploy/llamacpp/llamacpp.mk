# The engine image and the sidecar pair (deploy/llamacpp/): `make
# engine-image` builds deploy/llamacpp/Dockerfile (evictd-llama serve with
# the tiny GGUF) as $(ENGINE_IMAGE); `make pair-test` (part of `make
# image-test`) builds both images and starts deploy/kubernetes.yaml and
# deploy/compose.yaml as written (root, podman; deploy/pair-test.sh).
# Both take llama.cpp from LLAMA_CPP_SRC (a tree or a tarball) or
# ../shared/third_party, as `make evictd-llama` does.

ENGINE_IMAGE ?= evictd-llama:$(VERSION)
# A llama.cpp source to build the image from (an installed libllama cannot
# go into it).
ENGINE_LLAMA = $(if $(filter-out pkg-config,$(LLAMA_CPP_SRC)),$(LLAMA_CPP_SRC),$(wildcard ../shared/third_party/llama.cpp-*.tar.gz))

.PHONY: engine-image pair-test engine-gguf

# The GGUF comes from the host (PyTorch reads deploy/model/*.pt).
engine-gguf:
	@deploy/deps.sh build e2e llama
	@$(MAKE) --no-print-directory gguf

engine-image: engine-gguf
	B=$(B) deploy/llamacpp/build-image.sh $(ENGINE_IMAGE) $(LLAMA_OUT)/evictd-lm.gguf

pair-test:
	@if [ -z "$(ENGINE_LLAMA)" ]; then \
	  echo "pair-test: skipped: no llama.cpp source to build the engine image from (LLAMA_CPP_SRC=DIR or FILE.tar.gz, or ../shared/third_party/llama.cpp-*.tar.gz)"; \
	  exit 0; fi; \
	$(MAKE) --no-print-directory engine-gguf && B=$(B) deploy/pair-test.sh
