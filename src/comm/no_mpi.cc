// The MPI factory of a build without MPI (comm/CMakeLists.txt chooses this file).
#include "comm/mpi_communicator.h"

namespace kiln::comm {

bool built_with_mpi() { return false; }

Expected<std::unique_ptr<Communicator>> make_mpi_communicator() {
  return Status::error(ErrorCode::unsupported,
                       "Kiln was built without MPI: install Open MPI (scripts/install-deps) and "
                       "configure again to run collectives on more than one rank");
}

}  // namespace kiln::comm
