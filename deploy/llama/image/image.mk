# The engine image and the sidecar pair (deploy/llama/image/): `make
# engine-image` builds deploy/llama/image/Dockerfile (evictd-llama serve with
# the tiny GGUF) as $(ENGINE_IMAGE); `make pair-test` (part of `make
# image-test`) builds both images and starts deploy/kubernetes.yaml and
# deploy/compose.yaml as written (root, podman; deploy/pair-test.sh).
# Both take llama.cpp from LLAMA_CPP_SRC (a tree or a tarball) or the
# pinned npm package, as `make evictd-llama` does.

ENGINE_IMAGE ?= evictd-llama:$(VERSION)

.PHONY: engine-image pair-test engine-gguf

# The GGUF comes from the host (PyTorch reads deploy/model/*.pt).
engine-gguf:
	@deploy/deps.sh build e2e llama
	@$(MAKE) --no-print-directory gguf

engine-image: engine-gguf
	B=$(B) deploy/llama/image/build-image.sh $(ENGINE_IMAGE) $(LLAMA_OUT)/evictd-lm.gguf

pair-test:
	@$(MAKE) --no-print-directory engine-gguf && B=$(B) deploy/pair-test.sh
