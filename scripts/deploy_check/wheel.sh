# Check 7, wheel: the manylinux wheel (scripts/build_wheel.sh) installs and
# trains in a clean container, one with none of the build's -dev packages
# and no CUDA (python/README.md, "A wheel for other machines"). The wheel
# is built from the host's build tree (GNMR_BUILD_DIR, default build/);
# PyTorch comes from the project's venv, mounted read-only (the clean image
# has no torch, and a second copy of several GB buys nothing); gnmrd runs on
# the host behind a Unix socket mounted into the container, as a sidecar's
# would be. In the container: a fresh venv, `pip install --no-index` of the
# wheel, the extension's libraries all resolved (ldd), none of CUDA, then
# the 20-step loop of tests/python/pip_train_loop.py against gnmrd.
# Sourced by scripts/deploy_check.sh.

check_wheel() {
  local build=${GNMR_BUILD_DIR:-build} dir=$DC_WORK/wheel t0 torch_site gnmrd_pid
  local image=localhost/gnmr/wheel-clean:check
  local gnmrd=$build/bin/gnmrd
  [ -x "$gnmrd" ] || { fail wheel "no $gnmrd: build the project first (scripts/build.sh)"; return; }
  local venv_python
  venv_python=$(scripts/python_env.sh --path 2>/dev/null) ||
    { fail wheel "no project venv (scripts/python_env.sh) to take torch from"; return; }
  torch_site=$("$venv_python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') ||
    { fail wheel "the project venv has no torch"; return; }
  rm -rf "$dir"; mkdir -p "$dir/dist" "$dir/run"
  t0=$(date +%s)
  GNMR_BUILD_DIR=$build scripts/build_wheel.sh "$dir/dist" >"$dir/build.log" 2>&1 ||
    { tail -20 "$dir/build.log"; fail wheel "scripts/build_wheel.sh failed: $dir/build.log"; return; }
  local whl; whl=$(ls "$dir"/dist/gnmr-*manylinux*.whl)
  say "wheel: $(tail -1 "$dir/build.log")"
  build "$image" -f scripts/deploy_check/wheel.Dockerfile scripts/deploy_check

  "$gnmrd" --listen "unix:$dir/run/gnmrd.sock" --state-dir "$dir/state" >"$dir/gnmrd.log" 2>&1 &
  gnmrd_pid=$!
  if ! wait_for 20 test -S "$dir/run/gnmrd.sock"; then
    kill "$gnmrd_pid" 2>/dev/null
    fail wheel "gnmrd did not open its socket: $dir/gnmrd.log"; return
  fi
  local version; version=$(sed -n 's/.*project(gnmr VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
  local rc=0
  pm run --rm --name gnmr-dc-wheel --network=none \
    -v "$dir/dist:/wheel:ro" -v "$dir/run:/run/gnmr" -v "$torch_site:/torch-site:ro" \
    -v "$PWD/tests/python:/checks:ro" \
    -e GNMR_TARGET=unix:/run/gnmr/gnmrd.sock -e OPENBLAS_NUM_THREADS=1 \
    "$image" bash -ec "
      python3 -m venv /v
      /v/bin/pip install -q --no-index --disable-pip-version-check /wheel/$(basename "$whl")
      # torch after the venv's own packages: gnmr must come from the wheel.
      echo /torch-site > \$(/v/bin/python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')/zz-torch.pth
      so=\$(ls /v/lib/python3*/site-packages/gnmr/_gnmr*.so)
      if ldd \"\$so\" | grep -E 'not found|libcudart|libcupti|libcuda\\.'; then exit 3; fi
      echo \"wheel libraries: \$(ldd \"\$so\" | grep -c gnmr.libs) from the wheel, \$(ldd \"\$so\" | grep -vc gnmr.libs) from the system\"
      cd /tmp && /v/bin/python /checks/pip_train_loop.py /v $version
    " >"$dir/run.log" 2>&1 || rc=$?
  kill "$gnmrd_pid" 2>/dev/null; wait "$gnmrd_pid" 2>/dev/null
  tail -5 "$dir/run.log"
  if [ "$rc" -ne 0 ]; then
    fail wheel "the loop in the clean container failed (rc $rc): $dir/run.log"; return
  fi
  pass wheel "$(basename "$whl") installed in a clean Debian 12 container; $(grep -o 'wheel libraries: .*' "$dir/run.log"); $(grep -o '[0-9]*/20 plans with a decision' "$dir/run.log") ($(( $(date +%s) - t0 )) s)"
}
