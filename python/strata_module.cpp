// strata's Python module, the compiled half (`strata._strata`); python/strata/__init__.py is the public API.
// Everything here calls the same library functions as the strata command (load_experiment, select_cases,
// run_cases, search, ranked_results, to_json, print_layer_breakdown), so results are the command's JSON.
// The GIL is released while cases are simulated: Python threads can run cases in parallel.
#include "strata/errors.hpp"
#include "strata/report.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"
#include "strata/search.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

/// Raises the exception class of that name from the Python package (strata.InputError, ...), which parses the
/// message's `file:line:col: key:` into attributes.
[[noreturn]] void raise_python(const char* name, const std::exception& e) {
    py::object cls = py::module_::import("strata").attr(name);
    PyErr_SetObject(cls.ptr(), py::str(e.what()).ptr());
    throw py::error_already_set();
}

std::vector<std::string> case_names(const strata::Experiment& ex) {
    std::vector<std::string> names;
    for (const auto& sc : ex.cases)
        names.push_back(sc.name);
    return names;
}

/// Runs the selected cases of `ex` and returns the JSON `strata run --json` writes, and the failure bits.
py::tuple run(const strata::Experiment& ex, const std::string& case_name, bool analytical_only, unsigned jobs,
              const std::string& profile_path, std::uint64_t max_tasks_millions,
              bool representative_replicas) {
    std::string json;
    int failures = 0;
    {
        py::gil_scoped_release release;
        std::optional<strata::DeviceProfile> profile;
        if (!profile_path.empty()) profile = strata::load_device_profile(profile_path);
        const auto selected = strata::select_cases(ex, case_name, profile ? &*profile : nullptr);
        strata::CaseOptions options;
        options.analytical_only = analytical_only;
        options.simulation.max_tasks = max_tasks_millions * 1'000'000;
        options.simulation.max_tasks_option = "strata.run(max_tasks=...)";
        options.simulation.keep_timeline = false;
        options.simulation.representative_replicas = representative_replicas;
        const strata::RunOutcome outcome = strata::run_cases(selected, options, jobs);
        json = strata::to_json(ex.name, outcome.results);
        failures = outcome.failures;
    }
    return py::make_tuple(json, failures);
}

py::dict search(const strata::ModelSpec& model, const strata::SystemSpec& system, int gpus, int global_batch,
                const std::optional<std::string>& attention, const std::optional<std::string>& precision,
                std::vector<int> microbatches,
                int max_interleave, int simulate_top, int top, int jobs, const std::vector<std::string>& fix,
                double margin_pct, int simulate_max, std::uint64_t max_tasks_millions,
                bool representative_replicas, const std::optional<std::string>& gradient_average,
                std::optional<bool> grad_reduce_in_fp32,
                const std::vector<std::string>& overrides) {
    strata::SearchRequest req;
    // overrides: every candidate's value of keys the search does not vary. As with `strata search` and its flags, an
    // argument given (not None) and an override of its key conflict; otherwise the override wins over the
    // argument's default.
    strata::ExecutionOverrides set;
    if (!overrides.empty())
        set = strata::read_execution_overrides(overrides, strata::search_varied_execution_keys(), "search");
    req.model = model;
    req.system = system;
    req.gpus = gpus;
    req.global_batch = global_batch;
    strata::ExecutionChoices choices;
    if (attention && !(choices.attention = strata::attention_named(*attention)))
        throw strata::InputError("search: attention '" + *attention + "': expected unfused, flash or flash2");
    if (precision && !(choices.precision = strata::precision_named(*precision)))
        throw strata::InputError("search: precision '" + *precision + "': expected bf16, fp16 or fp8");
    if (gradient_average && !(choices.gradient_average = strata::gradient_average_named(*gradient_average)))
        throw strata::InputError("search: gradient_average '" + *gradient_average +
                                 "': expected scale, scale_always or in_collective");
    choices.grad_reduce_in_fp32 = grad_reduce_in_fp32;
    req.base = strata::with_choices(set, choices, [](std::string_view key) {
        return "search: " + std::string(key) + "= and overrides execution." + std::string(key) + " both given: keep one";
    });
    // As `strata search` notes: a model of today's kind whose attention neither the argument nor an override chose
    // runs the paper's unfused kernels. Warned before searching, so that it is seen when nothing fits too; stack level
    // 2: the caller of strata.search.
    if (!attention && !set.sets("attention") && req.base.attention == strata::Attention::unfused &&
        model.todays_kind() &&
        PyErr_WarnEx(PyExc_UserWarning,
                     "strata.search: attention left at its default, 'unfused' (the paper's 2022 kernels, which store "
                     "every s x s score, so its selective recompute pays); for a model of today's kind Megatron-Core "
                     "with Transformer Engine runs fused attention: attention='flash'",
                     2) != 0)
        throw py::error_already_set();  // warnings as errors
    std::string list;
    for (int b : microbatches) list += (list.empty() ? "" : ",") + std::to_string(b);
    strata::apply_constraint(req.space, "microbatch=" + list, "microbatches");
    strata::apply_constraint(req.space, "interleave=1.." + std::to_string(max_interleave), "max_interleave");
    for (const std::string& f : fix) strata::apply_constraint(req.space, f, "fix");
    if (margin_pct < 0) throw strata::InputError("search: margin " + std::to_string(margin_pct) + ": expected a percentage >= 0");
    req.margin = margin_pct / 100;
    req.simulate_top = std::max(top, simulate_top);
    req.simulate_max = simulate_max;
    req.max_tasks = max_tasks_millions * 1'000'000;
    req.max_tasks_option = "strata.search(max_tasks=...)";
    req.representative_replicas = representative_replicas;
    req.source = model.name + " on " + system.name;
    req.jobs = jobs;
    strata::SearchResult r;
    std::string json;
    {
        py::gil_scoped_release release;
        r = strata::search(req);
        // As `strata search` exits 2: nothing feasible is an error, not an empty answer.
        if (r.simulated.empty()) throw strata::InputError(strata::search_failure(req, r, !fix.empty()));
        const strata::SearchSummary summary = strata::search_summary(req, r, fix);
        json = strata::to_json("search " + req.model.name, strata::ranked_results(r, top), nullptr, &summary);
    }
    py::dict out;
    out["json"] = json;
    out["enumerated"] = r.enumerated;
    out["screened"] = r.screened;
    out["rejected"] = r.rejected;
    out["simulated"] = r.simulated.size();
    out["within_margin"] = r.within_margin;
    out["overturned_by"] = strata::screen_overturned(r);
    out["wall_s"] = r.wall_s;
    return out;
}

std::string explain(const strata::Experiment& ex, const std::string& case_name) {
    std::ostringstream out;
    for (const auto& sc : strata::select_cases(ex, case_name))
        strata::print_layer_breakdown(out, sc);
    return out.str();
}

}  // namespace

PYBIND11_MODULE(_strata, m) {
    m.doc() = "strata's compiled core; use the strata package (python/strata/__init__.py)";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const strata::InputError& e) {
            raise_python("InputError", e);
        } catch (const strata::SimulationError& e) {
            raise_python("SimulationError", e);
        } catch (const strata::Error& e) {
            raise_python("Error", e);
        }
    });
    py::class_<strata::Experiment>(m, "Experiment")
        .def_property_readonly("name", [](const strata::Experiment& e) { return e.name; })
        .def_property_readonly("file", [](const strata::Experiment& e) { return e.file.string(); })
        .def_property_readonly("cases", &case_names)
        .def("__repr__", [](const strata::Experiment& e) {
            return "<strata.Experiment '" + e.name + "', " + std::to_string(e.cases.size()) + " case(s)>";
        });
    py::class_<strata::ModelSpec>(m, "Model").def_property_readonly("name", [](const strata::ModelSpec& s) {
        return s.name;
    });
    py::class_<strata::SystemSpec>(m, "System")
        .def_property_readonly("name", [](const strata::SystemSpec& s) { return s.name; });
    m.def("load_experiment", [](const std::string& path, const std::vector<std::string>& overrides, const std::string& only_case) {
        return strata::load_experiment(path, overrides, only_case);
    }, py::arg("path"), py::arg("overrides") = std::vector<std::string>{}, py::arg("only_case") = std::string{});
    m.def("load_experiment_text", [](const std::string& text, const std::string& origin,
                                     const std::vector<std::string>& overrides, const std::string& only_case) {
        return strata::load_experiment_text(text, origin, overrides, only_case);
    }, py::arg("text"), py::arg("origin"), py::arg("overrides") = std::vector<std::string>{},
       py::arg("only_case") = std::string{});
    using Strings = std::vector<std::string>;
    m.def("load_model", [](const std::string& path, const Strings& overrides) { return strata::load_model(path, overrides); },
          py::arg("path"), py::arg("overrides") = Strings{});
    m.def("load_model_text", [](const std::string& text, const std::string& origin, const Strings& overrides) {
        return strata::load_model_text(text, origin, overrides);
    }, py::arg("text"), py::arg("origin"), py::arg("overrides") = Strings{});
    m.def("load_system", [](const std::string& path, const Strings& overrides) { return strata::load_system(path, overrides); },
          py::arg("path"), py::arg("overrides") = Strings{});
    m.def("load_system_text", [](const std::string& text, const std::string& origin, const Strings& overrides) {
        return strata::load_system_text(text, origin, overrides);
    }, py::arg("text"), py::arg("origin"), py::arg("overrides") = Strings{});
    m.def("run", &run);
    m.def("search", &search);
    m.def("explain", &explain);
    m.attr("CASE_BAD_INPUT") = int(strata::kCaseBadInput);
    m.attr("CASE_SIMULATION") = int(strata::kCaseSimulation);
    m.attr("CASE_INTERNAL") = int(strata::kCaseInternal);
}
