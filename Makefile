# The two commands of the README's quick start, plus the pieces they are made of.
#   make test   install what is missing, build (warnings are errors), run the whole ctest suite
#   make run    install, build, fetch the demo corpus (King James Bible, from Debian's bible-kjv), train
#               the demo Llama on short sequences of it, extend its context to 16K with FPDT, evaluate
#               both by context position and plot it (scripts/long_context_demo.sh; OpenMP
#               threads wait passively: see README, Speed)
BUILD ?= build
JOBS ?= $(shell nproc)

RUN_DIR ?= runs/demo
CMAKE_CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFPDT_WERROR=ON

.PHONY: deps configure build test run clean

deps:
	bash scripts/install_deps.sh

configure: deps
	$(CMAKE_CONFIGURE)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900 -LE cuda

# One apt run installs the build's packages and the demo's (corpus, plotting).
run:
	bash scripts/install_deps.sh bible-kjv python3-matplotlib
	$(CMAKE_CONFIGURE)
	cmake --build $(BUILD) -j $(JOBS) --target fpdt
	bash scripts/get_corpus.sh $(BUILD)/fpdt data
	bash scripts/long_context_demo.sh $(BUILD)/fpdt $(RUN_DIR)

clean:
	rm -rf $(BUILD)
