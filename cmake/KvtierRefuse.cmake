# kvtier_refuse_lines(REGEX <regex> WHY <text> FILES <files...> [EXCEPT <file names...>]):
# fails the configure step, naming the file and the line, when a line of one of FILES (other
# than those named in EXCEPT) matches REGEX. For rules of the code's shape that the build
# keeps: no fork in test code (KvtierTest.cmake), no "../" include in the store's rooms
# (src/store/CMakeLists.txt).
function(kvtier_refuse_lines)
  cmake_parse_arguments(R "" "REGEX" "WHY;FILES;EXCEPT" ${ARGN})
  list(JOIN R_WHY "" why)
  foreach(f IN LISTS R_FILES)
    get_filename_component(name ${f} NAME)
    if(name IN_LIST R_EXCEPT)
      continue()
    endif()
    file(STRINGS ${f} found REGEX "${R_REGEX}")
    if(found)
      message(FATAL_ERROR "${f}: ${found}: ${why}")
    endif()
  endforeach()
endfunction()
