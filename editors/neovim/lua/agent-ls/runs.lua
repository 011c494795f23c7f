--- The run view's model and buffer: the server's `agent-ls/runEvent` notifications folded into
--- runs, iterations and steps (as the VS Code extension's runs.ts does), shown in a buffer
--- (:AgentRuns) from which a step's diff opens and a step is undone. Every decision stays in the
--- server; this only arranges what it reported.
local R = {}

--- The runs, newest first, at most `keep`.
R.runs = {}
R.keep = 10

local function str(v)
  if v == nil or v == vim.NIL then return '' end
  return type(v) == 'string' and v or tostring(v)
end

local function num(v)
  return type(v) == 'number' and v or nil
end

local function find(id)
  for _, r in ipairs(R.runs) do
    if r.id == id then return r end
  end
end

--- The run in progress, if any.
function R.current()
  for _, r in ipairs(R.runs) do
    if r.status == nil then return r end
  end
end

local function iteration(run, n)
  for _, it in ipairs(run.iterations) do
    if it.n == n then return it end
  end
  local it = { n = n, patches = {}, tools = {}, streamed = '', tokens = 0, model_ms = 0 }
  table.insert(run.iterations, it)
  table.sort(run.iterations, function(a, b) return a.n < b.n end)
  return it
end

local function tests_of(d)
  return {
    state = str(d.state),
    passed = num(d.passed),
    failed = num(d.failed),
    duration_ms = num(d.duration_ms),
    environment = d.environment ~= nil and d.environment ~= vim.NIL and str(d.environment) or nil,
  }
end

--- Folds one event in; returns the run it changed.
function R.add(e)
  local run = find(e.runId)
  if not run then
    run = { id = e.runId, goal = '', plan = {}, iterations = {}, tokens = 0 }
    table.insert(R.runs, 1, run)
    while #R.runs > R.keep do table.remove(R.runs) end
  end
  local d = type(e.data) == 'table' and e.data or {}
  local n = num(e.iteration) or 0
  local t = e.type
  if t == 'intent' or t == 'resumed' then
    if str(d.goal) ~= '' then run.goal = str(d.goal) end
  elseif t == 'plan' then
    run.plan = {}
    for _, task in ipairs(type(d.tasks) == 'table' and d.tasks or {}) do
      table.insert(run.plan, { id = str(task.id), title = str(task.title) })
    end
  elseif t == 'iteration' then
    iteration(run, n).task = str(d.task) ~= '' and str(d.task) or nil
  elseif t == 'token' then
    if n > 0 then
      local it = iteration(run, n)
      it.streamed = it.streamed .. str(d.text)
    end
  elseif t == 'model_call' then
    run.tokens = num(d.tokens_total) or run.tokens
    run.cost_usd = num(d.cost_usd_total) or run.cost_usd
    if n > 0 then
      local it = iteration(run, n)
      local usage = type(d.usage) == 'table' and d.usage or {}
      it.tokens = it.tokens + (num(usage.input_tokens) or 0) + (num(usage.output_tokens) or 0)
      it.model_ms = it.model_ms + (num(d.duration_ms) or 0)
    end
  elseif t == 'patch' then
    local it = iteration(run, n)
    local notes = {}
    local review = type(d.review) == 'table' and d.review or {}
    for _, p in ipairs(type(review.protected) == 'table' and review.protected or {}) do
      table.insert(notes, ('protected %s: %s'):format(str(p[1]), str(p[2])))
    end
    for _, f in ipairs(type(review.findings) == 'table' and review.findings or {}) do
      table.insert(notes, ('%s:%d: %s'):format(str(f.path), num(f.line) or 0, (str(f.risk):gsub('_', ' '))))
    end
    -- A change the review gate sent back: the reviewer's findings it is to fix.
    for _, f in ipairs(type(review.fixes) == 'table' and review.fixes or {}) do
      table.insert(notes, 'fixes ' .. str(f.text))
    end
    local files = {}
    for _, f in ipairs(type(d.files) == 'table' and d.files or {}) do table.insert(files, str(f)) end
    table.insert(it.patches, { files = files, diff = str(d.diff), notes = notes })
    it.streamed = ''
  elseif t == 'approval' then
    local ps = iteration(run, n).patches
    if ps[#ps] then ps[#ps].accepted = d.accepted == true end
  elseif t == 'step' then
    -- The applied change became this history step: the newest patch not rejected.
    local ps = iteration(run, n).patches
    for i = #ps, 1, -1 do
      if ps[i].accepted ~= false then
        ps[i].step = num(d.step)
        break
      end
    end
  elseif t == 'memory' then
    -- Records remembered from earlier runs entered the prompts (docs/memory.md).
    run.remembered = {}
    for _, u in ipairs(type(d.used) == 'table' and d.used or {}) do
      table.insert(run.remembered, { id = str(u.id), run_id = str(u.run_id), score = num(u.score) or 0 })
    end
  elseif t == 'checkpoint' then
    -- Taken before the run's first write: the run can be rolled back from now on.
    if str(d.commit) ~= '' then run.checkpoint = str(d.commit) end
  elseif t == 'undo' or t == 'redo' then
    for _, it in ipairs(run.iterations) do
      for _, p in ipairs(it.patches) do
        if p.step ~= nil and p.step == num(d.step) then p.undone = t == 'undo' end
      end
    end
  elseif t == 'test_result' then
    if n > 0 then iteration(run, n).tests = tests_of(d) else run.baseline = tests_of(d) end
  elseif t == 'reflection' then
    iteration(run, n).reflection = {
      report = str(d.report ~= nil and d.report or d.text),
      next_step = str(d.next_step),
      task_id = str(d.task_id) ~= '' and str(d.task_id) or nil,
      passed = type(d.passed) == 'boolean' and d.passed or nil,
    }
  elseif t == 'tool_call' then
    -- What the coder read to find its way: "grep def net".
    local shown = {}
    for _, v in pairs(type(d.arguments) == 'table' and d.arguments or {}) do
      table.insert(shown, type(v) == 'string' and v or vim.json.encode(v))
    end
    table.insert(iteration(run, n).tools, vim.trim(str(d.name) .. ' ' .. table.concat(shown, ' ')))
  elseif t == 'tool_result' then
    local tools = iteration(run, n).tools
    if d.is_error == true and #tools > 0 then tools[#tools] = tools[#tools] .. ' (failed)' end
  elseif t == 'evaluation' then
    run.evaluation = { score = num(d.score) or 0, reason = str(d.reason) }
  elseif t == 'finished' then
    run.status = str(d.status)
    run.answer = str(d.answer)
  end
  return run
end

--- "remembered from run run_a (run_a-2, run_a-1), run run_b (run_b-1)" when earlier runs'
--- records entered the run's prompts, in the order memory ranked them; nil when none did.
function R.remembered_line(run)
  if type(run.remembered) ~= 'table' or #run.remembered == 0 then return nil end
  local order, ids = {}, {}
  for _, m in ipairs(run.remembered) do
    if not ids[m.run_id] then
      ids[m.run_id] = {}
      table.insert(order, m.run_id)
    end
    table.insert(ids[m.run_id], m.id)
  end
  local parts = {}
  for _, r in ipairs(order) do
    table.insert(parts, ('run %s (%s)'):format(r, table.concat(ids[r], ', ')))
  end
  return 'remembered from ' .. table.concat(parts, ', ')
end

--- A run's end as `agent-ls/runFinished` tells it: its git checkpoint, branch and commit.
function R.finished(outcome)
  if type(outcome) ~= 'table' or type(outcome.run_id) ~= 'string' then return end
  local run = find(outcome.run_id)
  if not run then
    run = { id = outcome.run_id, goal = '', plan = {}, iterations = {}, tokens = 0 }
    table.insert(R.runs, 1, run)
  end
  for _, key in ipairs({ 'checkpoint', 'branch', 'commit', 'worktree' }) do
    if type(outcome[key]) == 'string' then run[key] = outcome[key] end
  end
  run.status = run.status or str(outcome.status)
  vim.schedule(function() R.changed({ type = 'finished' }) end)
end

--- "checkpoint 1a2b3c4: :AgentRollback ID · :AgentCommit ID · :AgentPr ID" for a run with a
--- checkpoint, else nil. A run that worked in a worktree of its own (git.isolation =
--- "worktree") other than `root` (the server's folder) wrote its files there, and is rolled
--- back, committed or opened as a pull request from there: the line names the folder.
function R.actions_line(outcome, root)
  if type(outcome) ~= 'table' then return nil end
  local w = outcome.worktree
  if type(w) == 'string' and w ~= '' and not (root == w or (type(root) == 'string'
      and root:sub(1, #w + 1) == w .. '/')) then
    local on = type(outcome.branch) == 'string' and (' on branch ' .. outcome.branch) or ''
    return ('run %s worked in the worktree %s%s: open it (:tcd %s) to see, roll back, commit or open a pull request'):format(
      str(outcome.run_id), w, on, vim.fn.fnameescape(w))
  end
  local id = str(outcome.run_id)
  -- Rolled back at the review question: nothing of it is left to roll back or commit.
  if outcome.decision == 'rolled_back' then
    return ('run %s was rolled back at the review question'):format(id)
  end
  if type(outcome.checkpoint) ~= 'string' then return nil end
  return ('run %s: checkpoint %s: :AgentRollback %s · :AgentCommit %s · :AgentPr %s'):format(
    id, outcome.checkpoint:sub(1, 7), id, id, id)
end

--- "1.2k tokens · $0.0031", the figures a statusline shows.
function R.figures(tokens, cost)
  local t = tokens >= 1000 and ('%.1fk'):format(tokens / 1000) or tostring(tokens)
  if cost == nil then return t .. ' tokens' end
  return ('%s tokens · $%.4f'):format(t, cost)
end

--- "tests failed: 2 passed, 1 failed", or the environment problem.
function R.tests_label(t)
  if t.environment then return 'tests did not run: ' .. t.environment end
  local counts = {}
  if t.passed then table.insert(counts, t.passed .. ' passed') end
  if t.failed and t.failed > 0 then table.insert(counts, t.failed .. ' failed') end
  local label = 'tests ' .. t.state:gsub('_', ' ')
  if #counts > 0 then label = label .. ': ' .. table.concat(counts, ', ') end
  return label
end

--- A plan task's state, by the same rule as the VS Code view: done once a reflection passed it
--- or the run succeeded after working on it; in progress while the latest iteration works on
--- it; failed when the run ended without it passing; pending until an iteration takes it up.
function R.task_state(run, id)
  local worked
  for _, it in ipairs(run.iterations) do
    if it.reflection and it.reflection.task_id == id and it.reflection.passed == true then return 'done' end
    if it.n > 0 and it.task and vim.split(it.task, ' ')[1] == id then worked = it end
  end
  if not worked then return 'pending' end
  if run.status == 'done' then return 'done' end
  if run.status ~= nil then return 'failed' end
  return run.iterations[#run.iterations] == worked and 'in progress' or 'pending'
end

-- The view's buffer, and what each of its lines stands for (a patch, a run).
local view = { buf = nil, rows = {} }

--- The view's lines, and for each line what it stands for.
function R.render()
  local lines, rows = {}, {}
  local function add(line, row)
    for i, l in ipairs(vim.split(line, '\n')) do
      table.insert(lines, (i > 1 and '      ' or '') .. l)
      rows[#lines] = row
    end
  end
  add('agent-ls runs   <CR> open diff · u undo step · r rewind to step · X roll back run · c commit · p pull request · R rerun tests · C cancel · q close')
  if #R.runs == 0 then
    add('')
    add('No agent runs yet: :AgentFix, or :AgentRun <goal>')
  end
  for _, run in ipairs(R.runs) do
    add('')
    add(('%s  %s  [%s]  %s'):format(run.id, run.goal ~= '' and run.goal or '(goal)', run.status or 'running',
      R.figures(run.tokens, run.cost_usd)), { run = run })
    if run.checkpoint then
      local git = '  checkpoint ' .. run.checkpoint:sub(1, 7)
      if run.branch then git = git .. ' · branch ' .. run.branch end
      if run.commit then git = git .. ' · commit ' .. run.commit:sub(1, 7) end
      add(git .. '   (X roll back · c commit · p pull request)', { run = run })
    end
    if run.baseline then add('  before: ' .. R.tests_label(run.baseline)) end
    local remembered = R.remembered_line(run)
    if remembered then add('  ' .. remembered) end
    if #run.plan > 0 then
      add('  plan:')
      for _, task in ipairs(run.plan) do
        add(('    [%s] %s %s'):format(R.task_state(run, task.id), task.id, task.title))
      end
    end
    for _, it in ipairs(run.iterations) do
      if it.n > 0 then
        local head = ('  iteration %d'):format(it.n)
        if it.task then head = head .. '  ' .. it.task end
        if it.tokens > 0 then head = head .. ('  · %d tokens'):format(it.tokens) end
        if it.model_ms > 0 then head = head .. ('  · %.1f s'):format(it.model_ms / 1000) end
        add(head)
        for _, tool in ipairs(it.tools) do add('    read: ' .. tool) end
        for _, p in ipairs(it.patches) do
          local state = p.undone and 'undone' or p.step and ('step ' .. p.step)
            or p.accepted == false and 'not applied' or 'proposed'
          add(('    change to %s  [%s]'):format(table.concat(p.files, ', '), state), { patch = p, run = run })
          for _, note in ipairs(p.notes) do add('      ! ' .. note, { patch = p, run = run }) end
        end
        if it.tests then add('    ' .. R.tests_label(it.tests)) end
        if it.reflection then
          add('    reflection: ' .. it.reflection.report)
          if it.reflection.next_step ~= '' then add('    next: ' .. it.reflection.next_step) end
        end
        if it.streamed ~= '' and run.status == nil and #it.patches == 0 then
          -- The model's answer as it arrives.
          add('    model:')
          local streamed = vim.split(it.streamed, '\n')
          for i = math.max(1, #streamed - 20), #streamed do add('      ' .. streamed[i]) end
        end
      end
    end
    if run.evaluation then
      add(('  evaluation %s/5: %s'):format(run.evaluation.score, run.evaluation.reason))
    end
    if run.answer then add('  ' .. run.status .. ': ' .. run.answer, { run = run }) end
  end
  return lines, rows
end

local function redraw()
  if not (view.buf and vim.api.nvim_buf_is_valid(view.buf)) then return end
  local lines, rows = R.render()
  view.rows = rows
  vim.bo[view.buf].modifiable = true
  vim.api.nvim_buf_set_lines(view.buf, 0, -1, false, lines)
  vim.bo[view.buf].modifiable = false
  vim.bo[view.buf].modified = false
end

-- Tokens arrive many per second: they redraw the view at most every 100 ms.
local pending = false
function R.changed(e)
  if e.type ~= 'token' then
    redraw()
  elseif not pending then
    pending = true
    vim.defer_fn(function()
      pending = false
      redraw()
    end, 100)
  end
end

--- What the line under the cursor stands for.
function R.row()
  return view.rows[vim.api.nvim_win_get_cursor(0)[1]]
end

--- Opens (or shows again) the run view; `actions` has undo(step), rerun() and cancel().
function R.open(actions)
  if view.buf and vim.api.nvim_buf_is_valid(view.buf) then
    local win = vim.fn.bufwinid(view.buf)
    if win ~= -1 then
      vim.api.nvim_set_current_win(win)
    else
      vim.cmd('botright sbuffer ' .. view.buf)
    end
    redraw()
    return view.buf
  end
  vim.cmd('botright new')
  local buf = vim.api.nvim_get_current_buf()
  view.buf = buf
  vim.api.nvim_buf_set_name(buf, 'agent-ls://runs')
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = 'agentls-runs'
  local map = function(lhs, fn, desc) vim.keymap.set('n', lhs, fn, { buffer = buf, desc = desc }) end
  map('<CR>', function()
    local row = R.row()
    if row and row.patch then
      vim.cmd('botright new')
      local b = vim.api.nvim_get_current_buf()
      vim.bo[b].buftype = 'nofile'
      vim.bo[b].bufhidden = 'wipe'
      vim.bo[b].filetype = 'diff'
      vim.api.nvim_buf_set_lines(b, 0, -1, false, vim.split(row.patch.diff, '\n'))
      vim.bo[b].modifiable = false
      vim.keymap.set('n', 'q', '<cmd>close<cr>', { buffer = b })
    end
  end, 'agent-ls: open the diff of this change')
  map('u', function()
    local row = R.row()
    if row and row.patch and row.patch.step and not row.patch.undone then
      actions.undo(row.patch.step)
    else
      vim.notify('agent-ls: no applied step on this line', vim.log.levels.WARN)
    end
  end, 'agent-ls: undo this step')
  map('r', function()
    local row = R.row()
    if row and row.patch and row.patch.step and not row.patch.undone and actions.rewind then
      actions.rewind(row.patch.step)
    else
      vim.notify('agent-ls: no applied step on this line to rewind to', vim.log.levels.WARN)
    end
  end, 'agent-ls: rewind the run to this step and do something else from there')
  -- The run on the cursor's line (any line of a run belongs to it), for the git actions.
  local function on_run(action, what)
    return function()
      local row = R.row()
      if row and row.run and action then
        action(row.run.id)
      else
        vim.notify('agent-ls: no run on this line to ' .. what, vim.log.levels.WARN)
      end
    end
  end
  map('X', on_run(actions.rollback, 'roll back'), 'agent-ls: roll back this whole run')
  map('c', on_run(actions.commit, 'commit'), "agent-ls: commit this run's files")
  map('p', on_run(actions.pr, 'open a pull request for'), 'agent-ls: open a pull request for this run')
  map('R', actions.rerun, 'agent-ls: run the tests again')
  map('C', actions.cancel, 'agent-ls: cancel the run and the tests')
  map('q', '<cmd>close<cr>', 'close the run view')
  redraw()
  return buf
end

return R
