--- agent-ls for Neovim: starts the server, adds the :Agent* commands, shows run and test
--- status, and lets a proposal be reviewed (question, diff in a split) before it is applied.
local M = {}
local runs = require('agent-ls.runs')
local diagnostics = require('agent-ls.diagnostics')
M.runs = runs

M.config = {
  -- How to start the server.
  cmd = { 'agent-ls', 'serve' },
  -- Files whose nearest folder holding one of these is the workspace.
  root_markers = { '.agent-ls.toml', '.git', 'Cargo.toml', 'pyproject.toml', 'package.json', 'go.mod' },
  -- Sent as initializationOptions: any key of the server's configuration.
  -- Neovim's own confirmation of annotated edits is a blocking prompt per file, so the plugin
  -- asks the server to ask first (window/showMessageRequest), answered with vim.ui.select.
  settings = { agent = { approval = 'prompt' } },
  -- Forward the other language servers' diagnostics, so a run checks its edits with them
  -- and starts no language server of its own (docs/project-lsp.md).
  forward_diagnostics = true,
  -- Inline completion (Neovim 0.12+, when the server has a completion model configured;
  -- docs/completion.md): suggestions shown as you type, `accept_key` in insert mode takes
  -- the one shown (and types the key itself when none is). `enable = false` turns it off.
  inline_completion = { enable = true, accept_key = '<Tab>' },
}

--- What the statusline shows.
M.state = { run = nil, step = nil, tests = nil, last_run = nil, last_tests = nil }

local function notify(msg, level)
  vim.notify('agent-ls: ' .. msg, level or vim.log.levels.INFO)
end

local function client()
  return vim.lsp.get_clients({ name = 'agent-ls' })[1]
end

-- A split holding `text`; for a proposal's diff, `a` accepts and `r` rejects there.
local function show_in_split(text, filetype, review)
  vim.cmd('botright new')
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = filetype or 'diff'
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(text, '\n'))
  vim.bo[buf].modifiable = false
  vim.keymap.set('n', 'q', '<cmd>close<cr>', { buffer = buf })
  if review then
    vim.keymap.set('n', 'a', function() M.accept(); vim.cmd('close') end, { buffer = buf, desc = 'accept the proposal' })
    vim.keymap.set('n', 'r', function() M.reject(); vim.cmd('close') end, { buffer = buf, desc = 'reject the proposal' })
  end
  return buf
end

-- Saves one buffer the server asked for, only while it is at the version the server saw (so
-- typing that came after is never saved behind the user's back). Autocommands are skipped so
-- that a format-on-save never rewrites the accepted change, which undo checks against.
local function save(file)
  local name = vim.uri_to_fname(file.uri)
  local buf = vim.fn.bufnr(name)
  if buf == -1 or not vim.api.nvim_buf_is_loaded(buf) then return false end
  local version = file.version
  if version ~= nil and version ~= vim.NIL then
    -- The version Neovim last sent for the buffer (its changedtick when it sent it).
    local ours = rawget(vim.lsp.util.buf_versions or {}, buf) or vim.b[buf].changedtick
    if ours ~= version then return false end
  end
  if not vim.bo[buf].modified then return true end
  local ok = pcall(vim.api.nvim_buf_call, buf, function() vim.cmd('silent noautocmd write') end)
  return ok and not vim.bo[buf].modified
end

local handlers = {
  -- The server asks for the buffers an accepted agent edit changed to be written, so the disk
  -- the tests run on matches them and the next :w raises no "changed since reading" question.
  ['agent-ls/saveFiles'] = function(_, params)
    local saved = {}
    for _, f in ipairs(params.files or {}) do
      if save(f) then table.insert(saved, f.uri) end
    end
    return { saved = saved }
  end,
  -- What happened in a run, for :AgentRuns and the statusline's figures.
  ['agent-ls/runEvent'] = function(_, e)
    local ok, err = pcall(runs.add, e)
    if not ok then
      notify('a run event the view could not read: ' .. tostring(err), vim.log.levels.DEBUG)
      return
    end
    runs.changed(e)
    if e.type == 'model_call' then vim.cmd('redrawstatus') end
  end,
  ['agent-ls/testStatus'] = function(_, result)
    M.state.tests = result
    if result.state ~= 'running' then
      M.state.last_tests = result
    end
    vim.cmd('redrawstatus')
  end,
  ['agent-ls/runFinished'] = function(_, result, ctx)
    M.state.run = nil
    M.state.step = nil
    M.state.last_run = result
    runs.finished(result)
    vim.cmd('redrawstatus')
    -- A run that wrote files has a git checkpoint: the summary says what can be done with it
    -- (from the worktree, for a run that worked in one of its own).
    local client = ctx and vim.lsp.get_client_by_id(ctx.client_id)
    local actions = runs.actions_line(result, client and client.root_dir)
    if actions then notify(actions) end
    vim.api.nvim_exec_autocmds('User', { pattern = 'AgentRunFinished', data = result })
  end,
  -- The question before a change is applied: Accept, Reject, or Show diff (the server then
  -- sends the diff as a message, shown in a split where `a` accepts and `r` rejects). A
  -- question of several lines (the review question at a run's end: the verdict, then one
  -- finding a line) shows whole in a split while vim.ui.select asks with its first line, since
  -- a picker's prompt is one line; the split closes with the answer.
  ['window/showMessageRequest'] = function(_, params, ctx)
    local titles = vim.tbl_map(function(a) return a.title end, params.actions or {})
    local co = coroutine.running()
    local answer
    local first = params.message:match('^([^\n]*)\n')
    local from, split
    if first then
      from = vim.api.nvim_get_current_win()
      show_in_split((params.message:gsub('^agent%-ls: ', '')), 'markdown', false)
      split = vim.api.nvim_get_current_win()
    end
    vim.ui.select(titles, { prompt = first or params.message }, function(choice)
      answer = choice
      if co then coroutine.resume(co) end
    end)
    if answer == nil and co then coroutine.yield() end
    if split and vim.api.nvim_win_is_valid(split) then
      vim.api.nvim_win_close(split, true)
      if vim.api.nvim_win_is_valid(from) then vim.api.nvim_set_current_win(from) end
    end
    if answer == nil then return vim.NIL end
    return { title = answer }
  end,
  ['window/showMessage'] = function(_, params, ctx)
    -- A diff sent in answer to "Show diff" goes to a split; other messages to vim.notify.
    if params.message:match('^%-%-%- ') or params.message:match('\n@@ ') then
      show_in_split(params.message, 'diff', true)
      return
    end
    -- A long answer (an explanation, a failure report) reads better in a split than in the
    -- message area.
    local _, newlines = params.message:gsub('\n', '')
    if params.type ~= 1 and (newlines >= 4 or #params.message > 400) then
      show_in_split((params.message:gsub('^agent%-ls: ', '')), 'markdown', false)
      return
    end
    local levels = { vim.log.levels.ERROR, vim.log.levels.WARN, vim.log.levels.INFO, vim.log.levels.DEBUG }
    notify(params.message, levels[params.type] or vim.log.levels.INFO)
  end,
}

--- Starts (or reuses) the server for a buffer.
function M.start(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  if vim.bo[bufnr].buftype ~= '' then return end
  local root = vim.fs.root(bufnr, M.config.root_markers) or vim.fn.getcwd()
  local cfg = {
    name = 'agent-ls',
    cmd = M.config.cmd,
    root_dir = root,
    init_options = M.config.settings,
    settings = { ['agent-ls'] = M.config.settings },
    handlers = handlers,
    -- Ours on top of Neovim's own: the plugin answers agent-ls/saveFiles and forwards the
    -- editor's diagnostics as agent-ls/editorDiagnostics.
    capabilities = vim.tbl_deep_extend('force', vim.lsp.protocol.make_client_capabilities(),
      { experimental = { agentLs = {
        saveFiles = true, forwardsDiagnostics = M.config.forward_diagnostics ~= false,
      } } }),
  }
  -- On 0.11+ the configuration is also registered with vim.lsp.config, so a user's own
  -- vim.lsp.config('agent-ls', {...}) (and the '*' defaults) apply on top of setup's.
  if type(vim.lsp.config) == 'table' or type(vim.lsp.config) == 'function' then
    local ok, registered = pcall(function() return vim.lsp.config['agent-ls'] end)
    if ok and type(registered) == 'table' then
      cfg = vim.tbl_deep_extend('force', cfg, registered, { root_dir = root, name = 'agent-ls' })
    end
  end
  local id = vim.lsp.start(cfg, { bufnr = bufnr })
  if id then M.inline_completion(bufnr, id) end
  return id
end

--- Turns on Neovim's inline completion for `bufnr` with the agent-ls client `id` (0.12+),
--- once the server says it answers textDocument/inlineCompletion, and maps the accept key.
function M.inline_completion(bufnr, id)
  local opts = M.config.inline_completion or {}
  local ic = vim.lsp.inline_completion
  if opts.enable == false or not ic or not ic.enable then return end
  local function attach()
    local c = vim.lsp.get_client_by_id(id)
    if not c or not (c.server_capabilities or {}).inlineCompletionProvider then return end
    ic.enable(true, { bufnr = bufnr })
    local key = opts.accept_key
    if key and key ~= '' then
      vim.keymap.set('i', key, function()
        if not ic.get({ bufnr = bufnr }) then return key end
      end, { buffer = bufnr, expr = true, desc = 'agent-ls: accept the inline suggestion' })
    end
  end
  -- The capabilities are known once the server answered initialize.
  local c = vim.lsp.get_client_by_id(id)
  if c and c.initialized then
    attach()
  else
    vim.api.nvim_create_autocmd('LspAttach', {
      buffer = bufnr,
      once = true,
      callback = function(ev) if ev.data.client_id == id then attach() end end,
    })
  end
end

-- Neovim 0.11 made client methods take `self` (`client:request`); 0.10 has plain functions.
local function request(c, method, params, handler, bufnr)
  if vim.fn.has('nvim-0.11') == 1 then
    return c:request(method, params, handler, bufnr)
  end
  return c.request(method, params, handler, bufnr)
end

local function exec(command, args, on_result)
  local c = client()
  if not c then
    notify('the server is not running in this buffer', vim.log.levels.WARN)
    return
  end
  request(c, 'workspace/executeCommand', { command = command, arguments = args }, function(err, result)
    if err then
      notify(err.message, vim.log.levels.ERROR)
    elseif on_result then
      on_result(result)
    end
  end, vim.api.nvim_get_current_buf())
end

--- Starts a run; with a visual range the goal carries the selected text.
function M.run(goal, range)
  local args = { goal = goal, uri = vim.uri_from_bufnr(0) }
  if range then
    args.range = {
      start = { line = range[1] - 1, character = 0 },
      ['end'] = { line = range[2], character = 0 },
    }
  end
  exec('agent-ls.run', { args }, function(result)
    if result.run_id and result.run_id ~= vim.NIL then
      M.state.run = { id = result.run_id, goal = goal }
      vim.cmd('redrawstatus')
    elseif result.routed == 'agent-ls.status' then
      M.status()
    elseif result.routed == 'command' then
      notify('running ' .. result.command .. '; its failures arrive as diagnostics')
    end
  end)
end

function M.fix() M.run('fix the failing tests') end
--- Reviews the uncommitted work, or `staged`, or the branch against `base REV`; the findings
--- arrive as diagnostics.
function M.review(what)
  local arg
  if what == 'staged' then
    arg = { staged = true }
  elseif what and what:match('^base%s+%S') then
    arg = { base = what:match('^base%s+(%S+)') }
  end
  exec('agent-ls.review', arg and { arg } or {})
end
function M.accept() exec('agent-ls.accept', {}) end
function M.reject() exec('agent-ls.reject', {}) end
local function listed(files)
  return table.concat(vim.tbl_map(tostring, type(files) == 'table' and files or {}), ', ')
end

--- Undoes the latest agent step, or the step with this id (from :AgentStatus).
function M.undo(step)
  exec('agent-ls.undo', step and { { step = step } } or {})
end
function M.redo() exec('agent-ls.redo', {}) end
--- Takes the run of step `step` back to that step, code and conversation together, then runs
--- `goal` from there as a new run (the server's agent-ls.rewind, docs/rewind.md). Without a
--- goal, asks for one.
function M.rewind(step, goal)
  if not step then
    notify('give the step to go back to: :AgentRewind N what to do instead', vim.log.levels.WARN)
    return
  end
  if not goal or goal == '' then
    vim.ui.input({ prompt = ('agent-ls: from step %d, instead: '):format(step) }, function(answer)
      if answer and answer ~= '' then M.rewind(step, answer) end
    end)
    return
  end
  exec('agent-ls.rewind', { { step = step, goal = goal } }, function(result)
    if type(result) ~= 'table' or not result.run_id then return end
    local r = type(result.rewound) == 'table' and result.rewound or {}
    notify(('rewound run %s to step %s (undid %s: %s); running: %s'):format(
      tostring(r.run_id), tostring(r.step), listed(r.undone), listed(r.files), goal))
    M.state.run = { id = result.run_id, goal = goal }
    vim.cmd('redrawstatus')
    vim.api.nvim_exec_autocmds('User', { pattern = 'AgentRewindDone', data = result })
  end)
end


--- Rolls a whole run back to its git checkpoint (the latest run by default). When files
--- changed since the run the server refuses and names them: the user is asked a second time,
--- and "Roll back anyway" calls again with force. `force` skips the question.
function M.rollback(run, force)
  local args = {}
  if run and run ~= '' then args.run = run end
  if force then args.force = true end
  exec('agent-ls.rollback', { args }, function(result)
    if type(result) ~= 'table' then return end
    if type(result.refused) == 'string' then
      local anyway = 'Roll back anyway'
      vim.ui.select({ anyway, 'Keep my changes' }, {
        prompt = ('agent-ls: run %s: %s. Roll back anyway and lose those changes?'):format(
          result.run_id, result.refused),
      }, function(choice)
        if choice == anyway then M.rollback(result.run_id, true) end
      end)
      return
    end
    if type(result.rolled_back) == 'table' and #result.rolled_back == 0 then
      notify(('run %s is already rolled back'):format(result.run_id))
    else
      notify(('rolled back run %s: %s'):format(result.run_id, listed(result.rolled_back)))
    end
    vim.api.nvim_exec_autocmds('User', { pattern = 'AgentRollbackDone', data = result })
  end)
end

-- Commit and pull request of a run (the server's agent-ls.commit and agent-ls.pr).
local function git_action(command, what)
  return function(run)
    exec(command, { (run and run ~= '') and { run = run } or vim.empty_dict() }, function(result)
      local said = type(result) == 'table' and (result.message or result.url or result.commit) or nil
      notify(what .. ': ' .. (said and tostring(said) or vim.json.encode(result)))
    end)
  end
end
--- Commits the run's own files (the latest run by default).
M.commit = git_action('agent-ls.commit', 'commit')
--- Pushes the run's branch and opens a pull request.
M.pr = git_action('agent-ls.pr', 'pull request')
function M.rerun() exec('agent-ls.rerunTests', {}) end
function M.cancel() exec('agent-ls.cancel', {}) end
--- Goes on with a run a crash or restart interrupted: this one, or the newest.
function M.resume(run_id)
  if run_id then
    exec('agent-ls.resume', { { run_id = run_id } }, function(result)
      M.state.run = { id = result.run_id, goal = 'resumed' }
      vim.cmd('redrawstatus')
    end)
    return
  end
  exec('agent-ls.status', {}, function(result)
    local newest = (result.interrupted or {})[1]
    if not newest then
      notify('no interrupted run to resume')
      return
    end
    M.resume(newest.run_id)
  end)
end

function M.status()
  exec('agent-ls.status', {}, function(result)
    local lines = {}
    if result.active ~= vim.NIL and result.active then
      table.insert(lines, ('running %s: %s'):format(result.active.run_id, result.active.goal))
    else
      table.insert(lines, 'no run in progress')
    end
    if result.last ~= vim.NIL and result.last then
      table.insert(lines, ('last run %s: %s, %d iteration(s), %s'):format(
        result.last.run_id, result.last.status, result.last.iterations, result.last.answer))
      local actions = runs.actions_line(result.last)
      if actions then table.insert(lines, actions) end
    end
    for _, r in ipairs(result.interrupted or {}) do
      table.insert(lines, ('interrupted %s after %d iteration(s): %s (:AgentResume %s)'):format(
        r.run_id, r.iterations, r.goal, r.run_id))
    end
    -- The store did not answer in time (another process holds its lock): say so, since an
    -- empty list would read as "none".
    if type(result.interrupted_unknown) == 'string' then
      table.insert(lines, 'interrupted runs: ' .. result.interrupted_unknown)
    end
    for _, st in ipairs(result.steps or {}) do
      table.insert(lines, ('step %d%s: %s [%s]'):format(
        st.id, st.undone and ' (undone)' or '', st.goal, table.concat(st.files, ', ')))
    end
    notify(table.concat(lines, '\n'))
  end)
end

--- Opens the run view: the current and recent runs, their plan, iterations, changes, tests,
--- reflections and the model's text as it arrives.
function M.show_runs()
  return runs.open({
    undo = M.undo, rewind = M.rewind, rerun = M.rerun, cancel = M.cancel,
    rollback = M.rollback, commit = M.commit, pr = M.pr,
  })
end

--- For 'statusline': "agent: running tests · 1.2k tokens · $0.0031",
--- "tests: passed (3 passed, 0 failed)", or "".
function M.statusline()
  if M.state.run then
    local line = 'agent: ' .. (M.state.step or 'running')
    local current = runs.current()
    if current and current.tokens > 0 then
      line = line .. ' · ' .. runs.figures(current.tokens, current.cost_usd)
    end
    return line
  end
  local t = M.state.tests
  if t and t.state == 'running' then return 'tests: running' end
  -- The tests did not run at all (a missing program or module): not a failure of the code.
  if t and t.state == 'error' then return 'tests: error (did not run)' end
  if t then
    return ('tests: %s (%s passed, %s failed)'):format(t.state, t.passed or '?', t.failed or '?')
  end
  return ''
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', M.config, opts or {})
  if vim.fn.has('nvim-0.11') == 1 and vim.lsp.config then
    -- Registered, not enabled: the plugin starts the server itself, on every version.
    vim.lsp.config('agent-ls', {
      cmd = M.config.cmd,
      root_markers = M.config.root_markers,
      init_options = M.config.settings,
      settings = { ['agent-ls'] = M.config.settings },
    })
  end
  local group = vim.api.nvim_create_augroup('agent-ls', { clear = true })
  if M.config.forward_diagnostics ~= false then diagnostics.forward(group, client) end
  vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile' }, {
    group = group,
    callback = function(ev) M.start(ev.buf) end,
  })
  local cmd = vim.api.nvim_create_user_command
  cmd('AgentRun', function(o)
    M.run(o.args, o.range > 0 and { o.line1, o.line2 } or nil)
  end, { nargs = '+', range = true, desc = 'agent-ls: run the agent with a goal' })
  cmd('AgentFix', M.fix, { desc = 'agent-ls: fix the failing tests' })
  cmd('AgentReview', function(o) M.review(o.args ~= '' and o.args or nil) end,
    { nargs = '*', desc = 'agent-ls: review the uncommitted work (or: staged, base REV)' })
  cmd('AgentAccept', M.accept, { desc = 'agent-ls: accept the proposal' })
  cmd('AgentReject', M.reject, { desc = 'agent-ls: reject the proposal' })
  cmd('AgentUndo', function(o) M.undo(tonumber(o.args)) end,
    { nargs = '?', desc = 'agent-ls: undo the latest agent step, or step N' })
  cmd('AgentRewind', function(o)
    local step, goal = o.args:match('^%s*(%d+)%s*(.*)$')
    M.rewind(tonumber(step), goal)
  end, { nargs = '+', desc = 'agent-ls: take the run of step N back to it and do something else from there' })
  cmd('AgentResume', function(o) M.resume(o.args ~= '' and o.args or nil) end,
    { nargs = '?', desc = 'agent-ls: resume an interrupted run (the newest by default)' })
  cmd('AgentRollback', function(o) M.rollback(o.args, o.bang) end,
    { nargs = '?', bang = true, desc = 'agent-ls: roll back a whole run (the latest by default); ! forces' })
  cmd('AgentCommit', function(o) M.commit(o.args) end,
    { nargs = '?', desc = "agent-ls: commit a run's files (the latest run by default)" })
  cmd('AgentPr', function(o) M.pr(o.args) end,
    { nargs = '?', desc = "agent-ls: push a run's branch and open a pull request" })
  cmd('AgentRedo', M.redo, { desc = 'agent-ls: redo the latest undone agent step' })
  cmd('AgentRerun', M.rerun, { desc = 'agent-ls: run the tests again' })
  cmd('AgentCancel', M.cancel, { desc = 'agent-ls: cancel the run and the tests' })
  cmd('AgentStatus', M.status, { desc = 'agent-ls: the run in progress and the last outcome' })
  cmd('AgentRuns', M.show_runs, { desc = 'agent-ls: the run view (plan, iterations, diffs, undo)' })
  -- Progress arrives as LspProgress events; show it like any server's.
  vim.api.nvim_create_autocmd('LspProgress', {
    group = group,
    pattern = '*',
    callback = function(ev)
      local c = vim.lsp.get_client_by_id(ev.data.client_id)
      local value = ev.data.params and ev.data.params.value
      if c and c.name == 'agent-ls' and value and value.message then
        -- A run's steps also go to the statusline ("running the tests (iteration 1 of 15)").
        local token = tostring(ev.data.params.token or '')
        if token:find('^agent%-ls/run/') and value.kind ~= 'end' then
          M.state.run = M.state.run or { id = token:sub(#'agent-ls/run/' + 1) }
          M.state.step = value.message
          vim.cmd('redrawstatus')
        end
        vim.api.nvim_echo({ { 'agent-ls: ' .. value.message } }, false, {})
      end
    end,
  })
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf) ~= '' then
      M.start(buf)
    end
  end
end

return M
