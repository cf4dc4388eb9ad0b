// Open MPI behind the Communicator interface (comm/communicator.h).
//
// The communicator works on its own duplicate of MPI_COMM_WORLD, with MPI_ERRORS_RETURN set
// on it, so an MPI failure is a Status carrying MPI's own message and never an abort of the
// process, and the program's use of the world is left alone. Collectives are MPI's
// non-blocking ones (MPI_Iallreduce, MPI_Ibcast); a wait tests the request in a loop against
// a deadline (comm/communicator.h: collective_timeout_seconds), because MPI's own wait would
// block forever on a peer that died without mpirun noticing. A mean is MPI's sum divided by
// the world's size once the sum has arrived.
//
// MPI is started (MPI_Init_thread, serialized calls) unless the program already started it;
// then this communicator also ends it (MPI_Finalize) when it is destroyed at exit, except
// after a failure: MPI_Finalize waits for every peer, and a peer may be gone.
//
// Kiln builds without MPI when CMake does not find it (comm/CMakeLists.txt); the factory
// then says so.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "support/status.h"

namespace kiln::comm {

// Whether this build of Kiln has MPI.
bool built_with_mpi();

// Joins MPI_COMM_WORLD (starting MPI when needed); an error when MPI cannot start or Kiln was
// built without it.
Expected<std::unique_ptr<Communicator>> make_mpi_communicator();

}  // namespace kiln::comm
