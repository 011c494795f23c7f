-- Inline completion in a real headless Neovim 0.12: the plugin turns on
-- vim.lsp.inline_completion for agent-ls, a suggestion from the stub FIM server shows as
-- virtual text while typing, <Tab> accepts it; in the `stale` scenario an answer that came
-- after the user typed on is never shown. The steps run in a coroutine resumed by a timer,
-- so insert mode and typeahead are processed by Neovim's own loop between them. Results go to
-- $RESULT as JSON lines.
local result_file = os.getenv('RESULT')
local scenario = os.getenv('SCENARIO')
local ws = os.getenv('WORKSPACE')

local function record(name, ok, detail)
  local f = assert(io.open(result_file, 'a'))
  f:write(vim.json.encode({ name = name, ok = ok, detail = detail or '' }) .. '\n')
  f:close()
end

-- Every virtual text shown in the buffer now, joined.
local function shown(buf)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, -1, 0, -1, { details = true })) do
    local d = m[4] or {}
    for _, chunk in ipairs(d.virt_text or {}) do table.insert(out, chunk[1]) end
    for _, line in ipairs(d.virt_lines or {}) do
      for _, chunk in ipairs(line) do table.insert(out, chunk[1]) end
    end
  end
  return table.concat(out, '\n')
end

local stale_seen = false
local function wait_for(pred, ms, buf)
  local deadline = vim.uv.now() + ms
  while true do
    if buf and shown(buf):find('STALE', 1, true) then stale_seen = true end
    if pred() then return true end
    if vim.uv.now() > deadline then return false end
    coroutine.yield()
  end
end

local function exists(path) return vim.uv.fs_stat(path) ~= nil end

local function scenario_steps()
  vim.opt.rtp:prepend(os.getenv('PLUGIN'))
  require('agent-ls').setup({ cmd = { os.getenv('AGENT_LS'), 'serve' } })
  vim.cmd('edit ' .. ws .. '/main.py')
  local buf = vim.api.nvim_get_current_buf()
  local enabled = wait_for(function()
    return vim.lsp.inline_completion.is_enabled({ bufnr = buf })
  end, 20000)
  record('the plugin turns inline completion on', enabled)
  if not enabled then return end
  vim.api.nvim_win_set_cursor(0, { 2, 4 })
  vim.api.nvim_feedkeys('A', 'n', false)
  if scenario == 'stale' then
    -- The first request reaches the stub, which holds its answer; the user types on.
    record('the first request reaches the model', wait_for(function() return exists(ws .. '/.stub-1') end, 10000, buf))
    vim.api.nvim_feedkeys('r', 'n', false)
    local fresh = wait_for(function() return shown(buf):find('eturn a + b', 1, true) ~= nil end, 10000, buf)
    record('the suggestion for what was typed shows', fresh, shown(buf))
    -- The held answer has come back by now; watch a little longer for it to show.
    wait_for(function() return exists(ws .. '/.stub-done-1') end, 10000, buf)
    local until_ = vim.uv.now() + 400
    wait_for(function() return vim.uv.now() > until_ end, 1000, buf)
    record('the stale answer is never shown', not stale_seen)
  else
    local ok = wait_for(function() return shown(buf):find('return a + b', 1, true) ~= nil end, 10000, buf)
    record('the suggestion shows as virtual text', ok, shown(buf))
  end
  vim.api.nvim_feedkeys(vim.keycode('<Tab>'), 'm', false)
  local line = function() return vim.api.nvim_buf_get_lines(buf, 1, 2, false)[1] end
  local accepted = wait_for(function() return line() == '    return a + b' end, 5000)
  record('<Tab> accepts it into the buffer', accepted, line())
  local journal = ws .. '/.agent-ls/completions.jsonl'
  local counted = wait_for(function()
    local f = io.open(journal)
    if not f then return false end
    local text = f:read('*a')
    f:close()
    return text:find('"accepted"', 1, true) ~= nil
  end, 5000)
  record('the acceptance is counted', counted)
  vim.api.nvim_feedkeys(vim.keycode('<Esc>'), 'n', false)
end

local co = coroutine.create(function()
  local ok, err = pcall(scenario_steps)
  if not ok then record('the scenario runs', false, tostring(err)) end
  vim.schedule(function() vim.cmd('qall!') end)
end)
local timer = vim.uv.new_timer()
timer:start(0, 20, vim.schedule_wrap(function()
  if coroutine.status(co) == 'suspended' then
    local ok, err = coroutine.resume(co)
    if not ok then record('the scenario runs', false, tostring(err)) end
  end
end))
