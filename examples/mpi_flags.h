// mpi_flags.h: command-line parsing for the MPI examples (mpi_train, mpi_checkpoint,
// libtorch_train), where every rank parses its own flags.
#ifndef DISTSAMPLER_EXAMPLES_MPI_FLAGS_H_
#define DISTSAMPLER_EXAMPLES_MPI_FLAGS_H_

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>

namespace examples {

// Parses the flags on every rank, before any collective work, then the ranks agree on the
// outcome (one MPI_Allreduce: under MPMD launches their flags may differ) so that no rank is left
// waiting in a collective. Returns -1 to run, else the code every rank exits with after
// MPI_Finalize: 0 after --help, 2 after a bad flag. Only the first rank with the deciding outcome
// prints (the usage on stdout, or one line naming the flag on stderr), not one copy per rank.
inline int parse_on_every_rank(CLI::App& app, int argc, char** argv) {
  int status = 0;
  std::string message;
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    status = 1;
    message = app.help();
  } catch (const CLI::ParseError& e) {
    status = 2;
    message = app.get_name() + ": error: " + e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    message += " (see --help)\n";
  }
  struct {
    int status;
    int rank;
  } mine{status, 0}, decided{0, 0};
  MPI_Comm_rank(MPI_COMM_WORLD, &mine.rank);
  MPI_Allreduce(&mine, &decided, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
  if (decided.status == 0) return -1;
  if (decided.rank == mine.rank) {
    std::fputs(message.c_str(), decided.status == 1 ? stdout : stderr);
    std::fflush(nullptr);
  }
  return decided.status == 1 ? 0 : 2;
}

}  // namespace examples

#endif  // DISTSAMPLER_EXAMPLES_MPI_FLAGS_H_
