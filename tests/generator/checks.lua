-- The unit tests' reporter: check(cond, what) prints PASS/FAIL lines; finish() prints the
-- `N passed, N failed` summary and exits non-zero on a failure.
local M = { passed = 0, failed = 0 }

function M.check(cond, what)
  if cond then M.passed = M.passed + 1 else M.failed = M.failed + 1 end
  print((cond and "PASS " or "FAIL ") .. what)
end

function M.finish()
  print(string.format("%d passed, %d failed", M.passed, M.failed))
  os.exit(M.failed == 0 and 0 or 1)
end

return M
