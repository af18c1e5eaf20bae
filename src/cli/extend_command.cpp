// `fpdt extend` (see extend_command.h): options → train::ExtendSettings → train::run_extend.
#include "extend_command.h"

#include "fpdt/base/error.h"
#include "fpdt/base/options.h"
#include "fpdt/train/extend.h"

namespace fpdt::cli {

int command_extend(int argc, char** argv, comm::Communicator& world) {
  train::ExtendSettings settings;
  OptionSet options("extend",
                    "Extend a model's context by a recipe's stages (YAML: recipes/ has examples): each one trained from "
                    "the previous one's checkpoint, gated, reported in the recipe's run folder.",
                    "RECIPE");
  options.add("dry-run", "", "check the recipe whole and report each stage's layout and memory; train nothing",
              settings.dry_run);
  options.add("resume", "", "continue the run in the recipe's out folder (mid-stage, bitwise)", settings.resume);
  options.add("overwrite", "", "start afresh in an out folder that holds a run (its stages are deleted)",
              settings.overwrite);
  if (!options.parse(argc, argv)) return 0;
  if (options.positional().size() != 1)
    throw Error("cli", "fpdt extend takes one recipe", "fpdt extend recipes/smollm2-16k.yaml [--dry-run | --resume]");
  settings.recipe = options.positional()[0];
  return train::run_extend(settings, world);
}

}  // namespace fpdt::cli
