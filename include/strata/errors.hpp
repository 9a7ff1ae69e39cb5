// Typed errors thrown by the strata library. Only the command-line front end turns them into exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace strata {

/// Base of every error strata throws on purpose.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Bad user input: a scenario or profile file that is missing, unreadable, malformed or inconsistent.
/// The message starts with `file:line:col:` whenever a location is known. Exit code 2.
class InputError : public Error {
public:
    using Error::Error;
};

/// The simulation could not complete (e.g. a task graph that stalls). Exit code 3.
class SimulationError : public Error {
public:
    using Error::Error;
};

}  // namespace strata
