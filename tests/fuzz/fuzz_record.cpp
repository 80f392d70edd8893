// DaemonRecord::from_json on arbitrary JSON text (what RecordStore::list
// reads from a state dir). Accepted records must survive a round trip.
#include <nlohmann/json.hpp>

#include "common/mps/errors.hpp"
#include "common/mps/record.hpp"
#include "fuzz_util.hpp"

using namespace unilab::mps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  DaemonRecord r;
  try {
    r = DaemonRecord::from_json(j);
  } catch (const CudaMpsError&) {
    return 0;
  }
  // What we accept we must be able to write and read back unchanged.
  DaemonRecord again;
  try {
    again = DaemonRecord::from_json(nlohmann::json::parse(r.to_json().dump()));
  } catch (const CudaMpsError&) {
    fuzz::invariant_failed();
  }
  if (!(again == r)) fuzz::invariant_failed();
  return 0;
}
