# Warnings are errors, for every target of the project (not for dependencies).
add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Wshadow;-Wconversion;-Wno-sign-conversion;-Werror>"
  # FP8 bit-exactness needs plain IEEE arithmetic: no fused multiply-add
  # contraction, no fast-math reassociation (docs/numerics.md).
  "$<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>")
