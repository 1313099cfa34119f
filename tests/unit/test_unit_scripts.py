"""What a script is sent as: its includes pulled in, less the functions it never calls."""

from __future__ import annotations

from delayq.store.scripts import FUNCTION, build_source, without_unused_functions

SOURCE = """\
-- the header stays
local LIMIT = 10

-- used only by used()
local function helper(x) return x + LIMIT end

-- used by the script (unused() is named only in this comment)
local function used(x)
  if x then
    return helper(x)
  end
end

-- named by nothing
-- (two comment lines)
local function unused()
  return only_for_unused()
end

local function only_for_unused() return 1 end

return used(ARGV[1])
"""


def test_functions_nothing_names_go_with_their_comments_and_what_only_they_named() -> None:
    assert (
        without_unused_functions(SOURCE)
        == """\
-- the header stays
local LIMIT = 10

-- used only by used()
local function helper(x) return x + LIMIT end

-- used by the script (unused() is named only in this comment)
local function used(x)
  if x then
    return helper(x)
  end
end



return used(ARGV[1])
"""
    )


def test_a_source_whose_functions_are_all_named_is_unchanged() -> None:
    source = "local function f() return 1 end\nlocal function g()\n  return f()\nend\nreturn g()\n"
    assert without_unused_functions(source) == source


def test_every_script_keeps_each_function_it_names_and_only_those() -> None:
    for name in ("enqueue", "take", "ack", "sweep", "cancel"):
        source = build_source(name)
        defined = FUNCTION.findall(source)
        assert defined, name
        for function in defined:
            assert source.count(function + "(") >= 2, f"{name}: {function} is defined and never called"
