// mpi_main.h: the main() of the MPI examples (mpi_train, mpi_checkpoint, libtorch_train): MPI up,
// the flags parsed on every rank, the program, MPI down.
#ifndef DISTSAMPLER_EXAMPLES_MPI_MAIN_H_
#define DISTSAMPLER_EXAMPLES_MPI_MAIN_H_

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
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

// The whole main(): MPI_Init, `app`'s flags parsed on every rank (parse_on_every_rank: after
// --help or a bad flag every rank leaves through MPI_Finalize), then run(rank, world_size) with
// the rank in MPI_COMM_WORLD, MPI_Finalize, and run's result as the exit code. An exception run
// lets out is one rank's failure the others would wait for in their next collective: it prints
// "NAME: error: WHAT" and ends the job with MPI_Abort(2). A program that reports an error
// otherwise (every rank alike, say) catches it in run.
template <typename Run>
int mpi_main(int argc, char** argv, CLI::App& app, Run run) {
  MPI_Init(&argc, &argv);
  const int stop = parse_on_every_rank(app, argc, argv);
  if (stop >= 0) {
    MPI_Finalize();
    return stop;
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code;
  try {
    code = run(rank, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  }
  MPI_Finalize();
  return code;
}

}  // namespace examples

#endif  // DISTSAMPLER_EXAMPLES_MPI_MAIN_H_
