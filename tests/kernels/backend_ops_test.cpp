// The Backend conformance table (backend_ops.h) on the host backends, reference, cpu and cpu-guarded
// (its tensors in memory only its ops reach): every op
// against the float64 reference at several shapes. Also checks that the table's rows name every op
// of the Backend interface (backend_ops.inc), so a new op cannot go untested.
#include <algorithm>
#include <set>
#include <string>

#include "kernels/backend_ops.h"

namespace fpdt::kernels::conformance {
namespace {

INSTANTIATE_TEST_SUITE_P(Host, BackendOps,
                         ::testing::Combine(::testing::Values("reference", "cpu", "cpu-guarded"),
                                            ::testing::Range<size_t>(0, rows().size())),
                         row_test_name);

// The op names of backend_ops.inc: each entry's declaration as text, its name before the '('.
std::set<std::string> interface_ops() {
#define FPDT_BACKEND_OP(...) #__VA_ARGS__,
  const char* declarations[] = {
#include "fpdt/kernels/backend_ops.inc"
  };
  std::set<std::string> names;
  for (const std::string declaration : declarations) {
    const size_t open = declaration.find('(');
    const size_t space = declaration.rfind(' ', open);
    names.insert(declaration.substr(space + 1, open - space - 1));
  }
  return names;
}

TEST(BackendOpsTable, CoversEveryOpOnce) {
  const std::set<std::string> interface = interface_ops();
  EXPECT_EQ(interface.size(), 31u) << "backend_ops.inc changed: add its new ops to a row of backend_ops.h";
  std::multiset<std::string> tested;
  for (const Row& row : rows()) tested.insert(row.ops.begin(), row.ops.end());
  for (const std::string& op : interface) EXPECT_EQ(tested.count(op), 1u) << op;
  for (const std::string& op : tested) EXPECT_TRUE(interface.count(op)) << op << " is not a Backend op";
}

}  // namespace
}  // namespace fpdt::kernels::conformance
