# The two commands of the README's quick start, plus the pieces they are made of.
#   make test   install what is missing, build (warnings are errors), run the whole ctest suite
#   make run    (the main job; arrives with the trainer)
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build test clean

deps:
	bash scripts/install_deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFPDT_WERROR=ON
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

clean:
	rm -rf $(BUILD)
