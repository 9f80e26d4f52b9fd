# bpf_object(<name> <source.bpf.c> [HEADERS h...] [REQUIRES feature...] [DEFINES NAME[=V]...]
#            [TEST_ONLY])
#
# Compiles one BPF C file with clang (-g -O2 -target bpf, CO-RE against the
# generated vmlinux.h), strips DWARF (BTF stays), and runs
# `bpftool gen skeleton`. Exposes:
#   <name>_skel   INTERFACE library: link it to get <name>.skel.h on the path
#   SLUICE_BPF_OBJ_<name>   path of the .bpf.o (for tests that load raw objects)
# Header dependencies are tracked twice: clang's depfile (every #include) and
# the explicit HEADERS list (so a header that is only generated still orders).
#
# DEFINES are passed to clang as -DNAME[=V]: two objects from one source
# (e.g. aqm and aqm_compat) differ only by them.
#
# REQUIRES names the kernel features (as `sluiced --check` prints them) the
# object cannot load without, e.g. `bpf-cast-to-kern-ctx` (6.2+) or `tcx`
# (6.6+). Every object goes into the manifest
# ${CMAKE_BINARY_DIR}/vm-tests/bpf-objects.tsv that `sluice-objcheck` (host
# ctest and the VM suite) loads and attaches: an object that fails to load is
# a failure unless the kernel lacks one of its REQUIRES features, which makes
# it "unsupported on this kernel" with the probe's reason. TEST_ONLY objects
# (deliberately broken ones for the checker's own tests) stay out of it.

find_program(SLUICE_BPF_CLANG NAMES clang-16 REQUIRED
  DOC "clang used for BPF (Debian 12's clang-16; see docs/operations.md 'Why clang-16')")
find_program(SLUICE_LLVM_STRIP NAMES llvm-strip-16 llvm-strip REQUIRED)
find_program(SLUICE_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

# vmlinux.h: generated from the build host's BTF (see docs/operations.md "vmlinux.h").
# Override with -DSLUICE_VMLINUX_BTF=/path/to/vmlinux (an ELF with .BTF or a
# raw BTF blob) to build on a machine without /sys/kernel/btf/vmlinux.
set(SLUICE_VMLINUX_BTF "/sys/kernel/btf/vmlinux" CACHE FILEPATH
  "BTF source used to generate vmlinux.h")
set(SLUICE_BPF_GEN_DIR "${CMAKE_BINARY_DIR}/bpf")
set(SLUICE_VMLINUX_H "${SLUICE_BPF_GEN_DIR}/vmlinux/vmlinux.h")

if(NOT EXISTS "${SLUICE_VMLINUX_BTF}")
  message(FATAL_ERROR "sluice: no BTF at ${SLUICE_VMLINUX_BTF}; the kernel "
    "needs CONFIG_DEBUG_INFO_BTF=y, or pass -DSLUICE_VMLINUX_BTF=<vmlinux ELF>")
endif()

add_custom_command(
  OUTPUT "${SLUICE_VMLINUX_H}"
  COMMAND ${CMAKE_COMMAND} -E make_directory "${SLUICE_BPF_GEN_DIR}/vmlinux"
  COMMAND ${SLUICE_BPFTOOL} btf dump file "${SLUICE_VMLINUX_BTF}" format c
          > "${SLUICE_VMLINUX_H}.tmp"
  COMMAND ${CMAKE_COMMAND} -E rename "${SLUICE_VMLINUX_H}.tmp" "${SLUICE_VMLINUX_H}"
  COMMENT "Generating vmlinux.h from ${SLUICE_VMLINUX_BTF}"
  VERBATIM)
add_custom_target(sluice_vmlinux_h ALL DEPENDS "${SLUICE_VMLINUX_H}")

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|amd64")
  set(SLUICE_BPF_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(SLUICE_BPF_ARCH arm64)
else()
  set(SLUICE_BPF_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()

set(SLUICE_BPF_FEATURES btf ringbuf tc-clsact tcx struct-ops-tcp-cc tp-btf-qdisc
  bpf-cast-to-kern-ctx bpf-task-from-pid bpf-task-from-pid-xdp xdp)

function(bpf_object name src)
  cmake_parse_arguments(BO "TEST_ONLY" "" "HEADERS;REQUIRES;DEFINES" ${ARGN})
  foreach(f IN LISTS BO_REQUIRES)
    if(NOT f IN_LIST SLUICE_BPF_FEATURES)
      message(FATAL_ERROR "bpf_object(${name}): REQUIRES ${f}: unknown feature "
        "(known: ${SLUICE_BPF_FEATURES})")
    endif()
  endforeach()
  get_filename_component(src_abs "${src}" ABSOLUTE)
  set(out_dir "${SLUICE_BPF_GEN_DIR}/obj")
  set(obj "${out_dir}/${name}.bpf.o")
  set(skel "${out_dir}/${name}.skel.h")
  set(dep "${out_dir}/${name}.bpf.d")
  list(TRANSFORM BO_DEFINES PREPEND "-D" OUTPUT_VARIABLE defs)
  add_custom_command(
    OUTPUT "${obj}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${out_dir}"
    # -mcpu=v3: ALU32 + JMP32, accepted by the 6.1 verifier (v4 needs 6.6).
    COMMAND ${SLUICE_BPF_CLANG} -g -O2 -target bpf -mcpu=v3
            -D__TARGET_ARCH_${SLUICE_BPF_ARCH} ${defs}
            -Wall -Werror -Wno-unused-function -Wno-compare-distinct-pointer-types
            -I${SLUICE_BPF_GEN_DIR}/vmlinux
            -I${PROJECT_SOURCE_DIR}/include
            -I${PROJECT_SOURCE_DIR}/bpf
            # -MT: the depfile must name the rule's OUTPUT, not the .tmp
            # clang writes, or make ignores it and header edits rebuild nothing.
            -MD -MF "${dep}" -MT "${obj}"
            -c "${src_abs}" -o "${obj}.tmp"
    COMMAND ${SLUICE_LLVM_STRIP} -g "${obj}.tmp"
    COMMAND ${CMAKE_COMMAND} -E rename "${obj}.tmp" "${obj}"
    DEPENDS "${src_abs}" ${BO_HEADERS} "${SLUICE_VMLINUX_H}"
    DEPFILE "${dep}"
    COMMENT "BPF ${name}: clang -target bpf"
    VERBATIM)
  add_custom_command(
    OUTPUT "${skel}"
    COMMAND ${SLUICE_BPFTOOL} gen skeleton "${obj}" name "${name}" > "${skel}.tmp"
    COMMAND ${CMAKE_COMMAND} -E rename "${skel}.tmp" "${skel}"
    DEPENDS "${obj}"
    COMMENT "BPF ${name}: bpftool gen skeleton"
    VERBATIM)
  add_custom_target(${name}_skel_gen ALL DEPENDS "${skel}")
  add_dependencies(${name}_skel_gen sluice_vmlinux_h)
  add_library(${name}_skel INTERFACE)
  target_include_directories(${name}_skel INTERFACE "${out_dir}")
  target_link_libraries(${name}_skel INTERFACE PkgConfig::LIBBPF)
  add_dependencies(${name}_skel ${name}_skel_gen)
  set(SLUICE_BPF_OBJ_${name} "${obj}" CACHE INTERNAL "")
  set(SLUICE_BPF_REQ_${name} "${BO_REQUIRES}" CACHE INTERNAL "")
  if(BO_TEST_ONLY)
    set_property(GLOBAL APPEND PROPERTY SLUICE_BPF_TEST_OBJECTS "${name}")
  else()
    set_property(GLOBAL APPEND PROPERTY SLUICE_BPF_OBJECTS "${name}")
  endif()
endfunction()

# Writes <file>: one line per object of the global list <prop>,
# "name<TAB>path<TAB>required,features" ("-" when none). Called deferred at
# the end of the top-level configure so objects from every directory count.
function(sluice_write_bpf_manifest prop file)
  get_property(names GLOBAL PROPERTY ${prop})
  set(text "# sluice BPF objects: name, object file, kernel features it requires\n")
  foreach(n IN LISTS names)
    set(req "${SLUICE_BPF_REQ_${n}}")
    if(req STREQUAL "")
      set(req "-")
    endif()
    string(REPLACE ";" "," req "${req}")
    string(APPEND text "${n}\t${SLUICE_BPF_OBJ_${n}}\t${req}\n")
  endforeach()
  file(GENERATE OUTPUT "${file}" CONTENT "${text}")
endfunction()

# Makes <target> depend on the skeleton (and so the .bpf.o) of every object,
# product and TEST_ONLY. Called deferred, like the manifest, so objects
# declared in directories read after <target>'s count too.
function(sluice_depend_on_bpf_objects target)
  get_property(product GLOBAL PROPERTY SLUICE_BPF_OBJECTS)
  get_property(test_only GLOBAL PROPERTY SLUICE_BPF_TEST_OBJECTS)
  foreach(n IN LISTS product test_only)
    add_dependencies(${target} ${n}_skel_gen)
  endforeach()
endfunction()
