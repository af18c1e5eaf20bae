# The two commands of the README's quick start, plus the pieces they are made of.
#   make test   install what is missing, build (warnings are errors), run the whole ctest suite
#   make run    install, build, fetch the demo corpus (King James Bible, from Debian's bible-kjv),
#               train the demo Llama on it, print the start/end loss and a generated sample (OpenMP
#               threads wait passively: see README, Speed)
BUILD ?= build
JOBS ?= $(shell nproc)

RUN_DIR ?= runs/demo
RUN_STEPS ?= 150

.PHONY: deps configure build test run clean

deps:
	bash scripts/install_deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFPDT_WERROR=ON

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900 -LE cuda

run: configure
	cmake --build $(BUILD) -j $(JOBS) --target fpdt
	bash scripts/get_corpus.sh $(BUILD)/fpdt data
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} $(BUILD)/fpdt train --model llama-demo --data data/kjv --out $(RUN_DIR) --steps $(RUN_STEPS) \
	  --batch 8 --seq 256 --lr 3e-3 --min-lr 3e-4 --warmup 20 --eval-every 30 --eval-batches 8 \
	  --save-every 50 --sample-tokens 300 --prompt "And God said" --overwrite

clean:
	rm -rf $(BUILD)
