// `fpdt convert FILE.gguf --out DIR` (see convert_command.h): train/convert.h does the work.
#include "convert_command.h"

#include <cstdio>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/base/options.h"
#include "fpdt/model/gguf.h"
#include "fpdt/train/convert.h"

namespace fpdt::cli {

int command_convert(int argc, char** argv) {
  std::string out;
  OptionSet options("convert", "Convert a GGUF file (llama.cpp) into a Hugging Face model folder, weights dequantized to F32.",
                    "FILE.gguf");
  options.add("out", "DIR", "the folder to write (must not exist)", out);
  if (!options.parse(argc, argv)) return 0;
  if (options.positional().size() != 1 || out.empty())
    throw Error("cli", "fpdt convert takes one GGUF file and --out", "fpdt convert FILE.gguf --out DIR");
  const std::string path = options.positional()[0];
  if (!model::is_gguf_path(path))
    throw Error("cli", path + " is not a .gguf file", "fpdt convert reads GGUF files; Hugging Face folders are read as they are");
  std::fputs(train::convert_gguf("cli", path, out).c_str(), stdout);
  return 0;
}

}  // namespace fpdt::cli
