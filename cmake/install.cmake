# `cmake --install`: the strata command (and strata-calibrate when built), the plotting script, the shipped
# scenarios and docs, the public headers, the static libraries and a CMake package: find_package(strata) gives
# strata::strata (every part, with yaml-cpp, fmt, Boost found by strataConfig.cmake). CPack makes a .deb of it.
include(CMakePackageConfigHelpers)

set(STRATA_LIBRARIES strata_common strata_spec strata_engine strata_fabric strata_schedule strata_model strata_cost
    strata_workload strata_scenario strata_report strata_run strata_search strata_core)
install(TARGETS ${STRATA_LIBRARIES} EXPORT strataTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/strata DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(STRATA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${STRATA_CMAKE_DIR})
configure_package_config_file(cmake/strataConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/strataConfig.cmake
                              INSTALL_DESTINATION ${STRATA_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/strataConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/strataConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION ${STRATA_CMAKE_DIR})

install(TARGETS strata RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET strata-calibrate)
  install(TARGETS strata-calibrate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET strata_python)   # Debian's layout: /usr/lib/python3/dist-packages/strata with the /usr prefix of the .deb
  set(STRATA_PYTHON_INSTALL_DIR lib/python3/dist-packages/strata CACHE STRING "Where the Python package goes, under the prefix")
  install(TARGETS strata_python LIBRARY DESTINATION ${STRATA_PYTHON_INSTALL_DIR})
  install(FILES python/strata/__init__.py DESTINATION ${STRATA_PYTHON_INSTALL_DIR})
endif()
install(PROGRAMS plots/make_plots.py DESTINATION ${CMAKE_INSTALL_DATADIR}/strata/plots)
install(FILES plots/paper_values.json plots/README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/strata/plots)
install(DIRECTORY scenarios/ DESTINATION ${CMAKE_INSTALL_DATADIR}/strata/scenarios)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_PACKAGE_NAME strata)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Discrete-event simulator of large-transformer training")
set(CPACK_PACKAGE_CONTACT "strata <strata@localhost>")
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)   # yaml-cpp, fmt, Open MPI, ... from the binaries
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
include(CPack)
