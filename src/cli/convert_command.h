// The `fpdt convert` subcommand: a GGUF file made into a Hugging Face model folder (config.json,
// model.safetensors in F32, tokenizer.json and tokenizer_config.json) that `fpdt train --init-from`,
// `fpdt eval` and transformers' from_pretrained read.
#pragma once

namespace fpdt::cli {

// argv holds the arguments after "convert". Returns the exit status; throws fpdt::Error for bad input.
int command_convert(int argc, char** argv);

}  // namespace fpdt::cli
