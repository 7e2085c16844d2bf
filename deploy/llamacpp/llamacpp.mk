# The engine image and the sidecar pair (deploy/llamacpp/): `make
# engine-image` builds deploy/llamacpp/Dockerfile (evictd-llama serve with
# the tiny GGUF) as $(ENGINE_IMAGE); `make pair-test` builds both images and
# starts deploy/kubernetes.yaml and deploy/compose.yaml as written (root,
# podman; deploy/pair-test.sh).

ENGINE_IMAGE ?= evictd-llama:$(VERSION)
EVICTD_IMAGE ?= evictd:$(VERSION)

.PHONY: engine-image pair-test

engine-image: gguf
	B=$(B) deploy/llamacpp/build-image.sh $(ENGINE_IMAGE) $(LLAMA_OUT)/evictd-lm.gguf
