# Install-time script: man-style pages from the installed `cnnergy` itself — cnnergy(1) from
# `cnnergy --help` and cnnergy-COMMAND(1) from `cnnergy COMMAND --help` — so the pages never
# disagree with the program. Variables: CNNERGY_EXE (the built binary), CNNERGY_MAN_DIR (absolute
# destination without DESTDIR), CNNERGY_VERSION.
function(write_page name summary text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  string(TOUPPER "${name}" upper)
  file(WRITE "${out}" ".TH ${upper} 1 \"\" \"cnnergy ${CNNERGY_VERSION}\" \"cnnergy manual\"\n"
                      ".SH NAME\n${name} \\- ${summary}\n.SH DESCRIPTION\n.nf\n${text}\n.fi\n"
                      ".SH SEE ALSO\ncnnergy(1); /usr/share/doc/cnnergy/\n")
endfunction()

execute_process(COMMAND "${CNNERGY_EXE}" --help OUTPUT_VARIABLE main_help RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot write the help pages: '${CNNERGY_EXE} --help' failed (${rc})")
endif()
set(dest "$ENV{DESTDIR}${CNNERGY_MAN_DIR}")
file(MAKE_DIRECTORY "${dest}")
write_page(cnnergy "measure, explain and tune the time and energy of CNNs on GPUs" "${main_help}" "${dest}/cnnergy.1")
# Commands are listed as "  NAME   summary" lines in the main help.
string(REPLACE "\n" ";" lines "${main_help}")
set(count 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^  ([a-z][a-z-]+) +(.+)$")
    set(cmd "${CMAKE_MATCH_1}")
    set(summary "${CMAKE_MATCH_2}")
    execute_process(COMMAND "${CNNERGY_EXE}" ${cmd} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0 AND help)
      write_page("cnnergy-${cmd}" "${summary}" "${help}" "${dest}/cnnergy-${cmd}.1")
      math(EXPR count "${count} + 1")
    endif()
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "cannot write the help pages: no command found in '${CNNERGY_EXE} --help'")
endif()
message(STATUS "Installing: ${count} command pages and cnnergy.1 in ${dest}")
