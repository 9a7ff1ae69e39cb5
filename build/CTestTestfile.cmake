# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/main/build/strata_tests_include-b12d07c.cmake")
add_test([=[calibrate_quick_on_gpu]=] "/work/main/build/calibrate/strata-calibrate" "--quick" "--out" "/work/main/build/calibrated-quick.yaml")
set_tests_properties([=[calibrate_quick_on_gpu]=] PROPERTIES  SKIP_RETURN_CODE "4" TIMEOUT "1800" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;87;add_test;/work/main/CMakeLists.txt;0;")
subdirs("calibrate")
