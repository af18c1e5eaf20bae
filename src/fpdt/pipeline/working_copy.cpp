// A bf16 run's working copy (see working_copy.h): packed from the fp32 weights by the backend, read
// in place by the GEMMs.
#include "fpdt/pipeline/working_copy.h"

#include "fpdt/base/error.h"

namespace fpdt::pipeline {

void WorkingCopy::make(int unit) {
  if (!enabled()) return;
  const model::ParameterUnit& whole = layout_.units()[static_cast<size_t>(unit)];
  if (partition_.shape().run.zero <= 2)  // the whole unit: every rank holds every weight
    backend_.pack_bf16(partition_.words() + whole.begin, partition_.array(StateBuf::weights) + whole.begin,
                       whole.numel());
  else
    backend_.pack_bf16(partition_.own_words(unit), partition_.part(StateBuf::weights, unit),
                       partition_.own(unit).size());
}

const uint16_t* WorkingCopy::unit_words(int unit, int gathered_slot) const {
  if (!enabled()) return nullptr;
  if (partition_.shape().run.zero <= 2) return partition_.words() + layout_.units()[static_cast<size_t>(unit)].begin;
  if (!gathers_words(unit) || gathered_slot < 0) return nullptr;
  return partition_.slot_words(gathered_slot);
}

void WorkingCopy::read(int unit, uint16_t* words) const {
  FPDT_CHECK(enabled(), "zero", "an fp32 run keeps no bf16 working copy", "run with --precision bf16");
  backend_.memory().download(words, partition_.own_words(unit), static_cast<size_t>(partition_.own(unit).size()) * 2);
}

}  // namespace fpdt::pipeline
