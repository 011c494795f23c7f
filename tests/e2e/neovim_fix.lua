-- End-to-end in a real headless Neovim: the plugin starts the real agent-ls, the user picks
-- "Agent: fix failing tests" from the code actions, accepts (or rejects) the proposal, and the
-- file, the tests and the diagnostics follow. Results go to $RESULT as JSON lines.
local result_file = os.getenv('RESULT')
local scenario = os.getenv('SCENARIO')
local ws = os.getenv('WORKSPACE')
local results = {}

-- Each check is written at once, so a scenario stuck in a prompt still shows how far it got.
local function record(name, ok, detail)
  local line = vim.json.encode({ name = name, ok = ok, detail = detail or '' })
  table.insert(results, line)
  local f = assert(io.open(result_file, 'a'))
  f:write(line .. '\n')
  f:close()
end

local function finish()
  vim.cmd('qall!')
end

-- The outcome of the scenario's run, once it has ended.
local finished
local function run_finished(ms)
  return vim.wait(ms or 30000, function() return finished ~= nil end, 20)
end

local ok, err = pcall(function()
  vim.opt.rtp:prepend(os.getenv('PLUGIN'))
  local agent = require('agent-ls')
  local settings = {
    model = { provider = 'replay', replay_file = ws .. '/.replay.jsonl' },
    agent = { approval = 'prompt' },
  }
  if scenario == 'diagnostics' then
    -- The edits are checked with the editor's own diagnostics: the language server agent-ls
    -- would start instead writes a file, which must never appear.
    settings.agent = { approval = 'prompt', evaluate = false, review = 'off' }
    settings.lsp_servers = { wait_ms = 60000, servers = { python = {
      command = { 'python3', '-c', ("open(%q, 'w')"):format(ws .. '/spawned') }, patterns = { '*.py' },
    } } }
  end
  if scenario == 'broken' then
    -- A test command that cannot run: python without the module it names.
    settings.test = { command = { 'python3', '-m', 'no_such_runner' }, allowlist = { 'python3 -m no_such_runner' } }
  end
  agent.setup({ cmd = { os.getenv('AGENT_LS'), 'serve' }, settings = settings })
  -- Each scenario starts one run; its outcome arrives with the plugin's AgentRunFinished.
  vim.api.nvim_create_autocmd('User', {
    pattern = 'AgentRunFinished',
    callback = function(ev) finished = ev.data end,
  })
  if scenario == 'explain' then
    -- A user's own vim.lsp.config on top of setup's (Neovim 0.11+).
    vim.lsp.config('agent-ls', { init_options = { agent = { max_iterations = 7 } } })
  end
  -- The user's answer to the question before the change is applied.
  local asked = false
  -- The answer to the rollback's second confirmation, set by the rollback scenario.
  local rollback_answer, rollback_prompt
  -- The review question at a run's end: its prompt, what the split beside it shows, and the
  -- answer (set by the review_question scenario; others keep the change).
  local review_prompt, review_split, review_buf, review_answer
  vim.ui.select = function(items, opts, on_choice)
    if vim.tbl_contains(items, 'Roll back run') then
      review_prompt = opts.prompt
      review_buf = vim.api.nvim_get_current_buf()
      review_split = table.concat(vim.api.nvim_buf_get_lines(review_buf, 0, -1, false), '\n')
      on_choice(review_answer or 'Keep')
      return
    end
    if opts.prompt:find('Roll back anyway', 1, true) then
      rollback_prompt = opts.prompt
      on_choice(rollback_answer)
      return
    end
    asked = true
    -- The tester's run asks twice: for its test file, then for the fix.
    local named = opts.prompt:find('calc.py', 1, true) ~= nil
      or (scenario == 'tester' and opts.prompt:find('test_add.py', 1, true) ~= nil)
    record('question names the file', named, opts.prompt)
    -- In the cancel scenario the user walks away from the question.
    if scenario ~= 'rerun_cancel' then
      on_choice(scenario == 'reject' and 'Reject' or 'Accept')
    end
  end

  vim.cmd('edit ' .. ws .. '/calc.py')
  local buf = vim.api.nvim_get_current_buf()
  local attached = vim.wait(10000, function()
    local c = vim.lsp.get_clients({ name = 'agent-ls', bufnr = buf })[1]
    return c ~= nil and c.initialized == true
  end, 20)
  record('attached', attached)
  local client = vim.lsp.get_clients({ name = 'agent-ls', bufnr = buf })[1]
  record('position encoding negotiated', client.offset_encoding == 'utf-8', client.offset_encoding)

  if scenario == 'explain' then
    -- :AgentRun with a question answers without editing; the long answer opens in a split.
    local conf = client:request_sync('agent-ls/configuration', vim.NIL, 5000, buf)
    local entry
    for _, e in ipairs(conf and conf.result and conf.result.entries or {}) do
      if e.key == 'agent.max_iterations' then entry = e end
    end
    record('vim.lsp.config overrides reach the server', entry ~= nil and entry.value == 7
      and entry.source:find('initializationOptions', 1, true) ~= nil, vim.inspect(entry))
    vim.cmd('AgentRun explain what add does')
    record('the run answers', run_finished(15000))
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    local shown = vim.wait(5000, function()
      for _, win in ipairs(vim.api.nvim_list_wins()) do
        local b = vim.api.nvim_win_get_buf(win)
        if vim.bo[b].filetype == 'markdown' then
          return table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\n'):find('subtracts', 1, true) ~= nil
        end
      end
      return false
    end, 20)
    record('the explanation opens in a markdown split', shown)
    local disk = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
    record('nothing edited', disk:find('return a - b', 1, true) ~= nil, disk)
    return
  end

  if scenario == 'rerun_cancel' then
    -- :AgentRerun runs the tests: add is broken, so its failures show and the statusline says so.
    local test_buf = vim.fn.bufadd(ws .. '/test_calc.py')
    vim.cmd('AgentRerun')
    record('rerun publishes the failures', vim.wait(15000, function() return #vim.diagnostic.get(test_buf) > 0 end, 20))
    record('statusline says the tests failed', vim.wait(5000, function()
      return agent.statusline():find('failed', 1, true) ~= nil
    end, 20), agent.statusline())
    -- A run waits at the question before its change; :AgentCancel ends it, nothing changes.
    vim.cmd('AgentFix')
    record('the run asks before changing', vim.wait(15000, function() return asked end, 20))
    record('statusline shows the run', agent.statusline():find('agent:', 1, true) ~= nil, agent.statusline())
    vim.cmd('AgentCancel')
    record('cancel ends the run', run_finished(10000))
    record('status cancelled', finished ~= nil and finished.status == 'cancelled', finished and finished.answer)
    local lines = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    local disk = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
    record('buffer unchanged', lines:find('return a - b', 1, true) ~= nil, lines)
    record('disk unchanged', disk:find('return a - b', 1, true) ~= nil, disk)
    record('statusline idle again', agent.statusline():find('agent:', 1, true) == nil, agent.statusline())
    return
  end

  if scenario == 'broken' then
    -- The tests cannot run: an error that names the fix, no diagnostics, and the fix run
    -- stops before asking the model.
    vim.cmd('AgentFix')
    record('run finished', run_finished())
    local answer = finished and finished.answer or ''
    record('the run fails naming the fix', finished ~= nil and finished.status == 'failed'
      and answer:find('No module named no_such_runner', 1, true) ~= nil and answer:find('install', 1, true) ~= nil, answer)
    record('the statusline says error, not failed', vim.wait(5000, function()
      return agent.statusline():find('tests: error', 1, true) ~= nil
    end, 20), agent.statusline())
    record('no diagnostics', #vim.diagnostic.get() == 0, tostring(#vim.diagnostic.get()))
    local journal = table.concat(vim.fn.readfile(vim.fn.glob(ws .. '/.agent-ls/runs/*.jsonl', false, true)[1] or '/dev/null'), '\n')
    record('no model call', journal:find('"type":"finished"', 1, true) ~= nil
      and journal:find('"type":"model_call"', 1, true) == nil, journal)
    local disk = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
    record('nothing edited', disk:find('return a - b', 1, true) ~= nil, disk)
    return
  end

  if scenario == 'create' then
    -- A run that fixes add and creates helpers.py: Neovim creates the file as it applies the
    -- edit, the server takes it as the step's, the tests pass, undo deletes it, redo brings it.
    vim.cmd('AgentFix')
    record('run finished', run_finished())
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    record('tests passed', finished ~= nil and finished.tests and finished.tests.failed == 0
      and finished.tests.passed == 4, finished and vim.inspect(finished.tests))
    local helpers = ws .. '/helpers.py'
    local disk = vim.fn.filereadable(helpers) == 1 and table.concat(vim.fn.readfile(helpers), '\n') or ''
    record('helpers.py created on disk', disk:find('return 2 * x', 1, true) ~= nil, disk)
    local hbuf = vim.fn.bufnr(helpers)
    record('helpers.py open and saved', hbuf ~= -1 and vim.api.nvim_buf_is_loaded(hbuf)
      and not vim.bo[hbuf].modified, tostring(hbuf))
    if hbuf ~= -1 then
      local state = client:request_sync('agent-ls/documentState',
        { textDocument = { uri = vim.uri_from_fname(helpers) } }, 2000, buf)
      local server_text = state and state.result and state.result.text
      record('the server holds what the buffer and the disk hold', server_text == disk .. '\n'
        and table.concat(vim.api.nvim_buf_get_lines(hbuf, 0, -1, false), '\n') == disk,
        vim.inspect({ state = state, buffer = vim.api.nvim_buf_get_lines(hbuf, 0, -1, false), disk = disk }))
    end
    record('no buffer left unsaved', #vim.tbl_filter(function(b)
      return vim.api.nvim_buf_is_loaded(b) and vim.bo[b].modified
    end, vim.api.nvim_list_bufs()) == 0)
    vim.cmd('AgentUndo')
    record('undo deletes the file', vim.wait(10000, function()
      return vim.fn.filereadable(helpers) == 0 and vim.fn.bufnr(helpers) == -1
    end, 20), tostring(vim.fn.bufnr(helpers)))
    record('undo restores calc.py', vim.wait(5000, function()
      return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n'):find('return a - b', 1, true) ~= nil
    end, 20))
    local settled = vim.wait(5000, function()
      local r = client:request_sync('workspace/executeCommand', { command = 'agent-ls.status', arguments = {} }, 2000, buf)
      local steps = r and r.result and r.result.steps
      return steps ~= nil and steps[1] ~= nil and steps[1].undone == true
    end, 50)
    record('undo recorded', settled)
    vim.cmd('AgentRedo')
    record('redo creates it again', vim.wait(10000, function()
      return vim.fn.filereadable(helpers) == 1
        and table.concat(vim.fn.readfile(helpers), '\n'):find('return 2 * x', 1, true) ~= nil
    end, 20))
    return
  end

  if scenario == 'rollback' then
    -- A run in a git repository fixes calc.py and creates notes.py; the user types in calc.py
    -- and rolls the run back: refused and kept, then confirmed a second time.
    local original = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
    local rolled
    vim.api.nvim_create_autocmd('User', {
      pattern = 'AgentRollbackDone',
      callback = function(ev) rolled = ev.data end,
    })
    vim.cmd('AgentFix')
    record('run finished', run_finished())
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    local checkpoint = finished and finished.checkpoint
    record('the run has a checkpoint', type(checkpoint) == 'string', vim.inspect(finished))
    if type(checkpoint) ~= 'string' then return end
    local notes = ws .. '/notes.py'
    record('notes.py created', vim.fn.filereadable(notes) == 1)
    record('the summary names the commands', (agent.runs.actions_line(finished) or ''):find(
      ':AgentRollback ' .. finished.run_id, 1, true) ~= nil, agent.runs.actions_line(finished))
    vim.cmd('AgentRuns')
    local view = vim.api.nvim_get_current_buf()
    local text
    record('the run view shows the checkpoint and its actions', vim.wait(5000, function()
      text = table.concat(vim.api.nvim_buf_get_lines(view, 0, -1, false), '\n')
      return text:find('checkpoint ' .. checkpoint:sub(1, 7), 1, true) ~= nil
        and text:find('X roll back', 1, true) ~= nil
    end, 20), text)
    vim.cmd('close')
    -- The user types in calc.py after the run and does not save.
    vim.api.nvim_buf_set_lines(buf, 0, 0, false, { '# mine' })
    rollback_answer = 'Keep my changes'
    vim.cmd('AgentRollback')
    record('the rollback asks a second time, naming the file', vim.wait(10000, function()
      return rollback_prompt ~= nil
    end, 20) and rollback_prompt:find('calc.py', 1, true) ~= nil, rollback_prompt)
    vim.wait(500)
    local lines = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    record('kept: nothing rolled back', rolled == nil and lines:find('# mine', 1, true) ~= nil
      and vim.fn.filereadable(notes) == 1, lines)
    rollback_prompt = nil
    rollback_answer = 'Roll back anyway'
    vim.cmd('AgentRollback')
    record('confirmed: rolled back', vim.wait(15000, function() return rolled ~= nil end, 20))
    lines = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    record('the buffer holds the checkpoint', lines == original, lines)
    record('the disk holds the checkpoint', vim.wait(5000, function()
      return table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n') == original
    end, 20), table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n'))
    record('the created file is gone, and its buffer', vim.wait(5000, function()
      local b = vim.fn.bufnr(notes)
      return vim.fn.filereadable(notes) == 0 and (b == -1 or not vim.api.nvim_buf_is_loaded(b))
    end, 20), tostring(vim.fn.bufnr(notes)))
    local status = vim.fn.system({ 'git', '-C', ws, 'status', '--porcelain' })
    record('git sees the tree as at the checkpoint', status == '', status)
    record('u undoes the rollback in the buffer', pcall(vim.cmd, 'normal! u') and
      table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n') ~= original)
    return
  end

  if scenario == 'review_question' then
    -- A fix run in a git repository whose reviewer finds a P1 (advise mode): the review
    -- question shows the finding in a split, and "Roll back run" takes the buffer and the
    -- file back to before the run.
    local original = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    review_answer = 'Roll back run'
    vim.cmd('AgentFix')
    record('run finished', run_finished())
    record('the review question was asked with the verdict', review_prompt ~= nil
      and review_prompt:find('the patch is incorrect', 1, true) ~= nil, review_prompt)
    record('its split lists the finding', review_split ~= nil
      and review_split:find('[P1] add overflows — calc.py:5 (0.90)', 1, true) ~= nil, review_split)
    record('the split closed with the answer', review_buf ~= nil
      and not vim.api.nvim_buf_is_valid(review_buf))
    record('the decision is rolled back', finished ~= nil and finished.decision == 'rolled_back',
      vim.inspect(finished))
    local lines
    record('the buffer is back to before the run', vim.wait(10000, function()
      lines = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
      return lines == original
    end, 20), lines)
    record('the disk is back to before the run', vim.wait(5000, function()
      return table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n') == original
    end, 20))
    local reviewed = vim.tbl_filter(function(d) return d.source == 'agent-ls review' end,
      vim.diagnostic.get(buf))
    record('no finding is left on a line', #reviewed == 0, vim.inspect(reviewed))
    record('the summary says it was rolled back', (agent.runs.actions_line(finished) or ''):find(
      'rolled back at the review question', 1, true) ~= nil, agent.runs.actions_line(finished))
    return
  end

  if scenario == 'run_review' then
    -- A fix run in advise mode: after its tests pass, the replayed reviewer's P2 on line 5
    -- becomes a warning there, and :AgentUndo takes it away with the step.
    vim.cmd('AgentFix')
    record('run finished', run_finished())
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    record('the run was reviewed', finished ~= nil and type(finished.review) == 'table'
      and finished.review.verdict == 'incorrect', vim.inspect(finished and finished.review))
    local function reviewed()
      return vim.tbl_filter(function(d) return d.source == 'agent-ls review' end, vim.diagnostic.get(buf))
    end
    local ds
    record('the P2 is a warning on line 5', vim.wait(10000, function()
      ds = reviewed()
      return #ds == 1 and ds[1].lnum == 4 and ds[1].severity == vim.diagnostic.severity.WARN
        and ds[1].code == 'P2'
    end, 20), vim.inspect(ds))
    vim.cmd('AgentUndo')
    record('undo takes the finding away', vim.wait(10000, function()
      return #reviewed() == 0
        and table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n'):find('return a - b', 1, true) ~= nil
    end, 20), vim.inspect(reviewed()))
    return
  end

  if scenario == 'review' then
    -- The user's own uncommitted change to calc.py (made before Neovim started): :AgentReview
    -- staged finds nothing staged, :AgentReview reviews the working tree, and the replayed
    -- reviewer's P1 (line 5) and P3 (line 9) become diagnostics on those lines.
    local function reviewed()
      return vim.tbl_filter(function(d) return d.source == 'agent-ls review' end, vim.diagnostic.get(buf))
    end
    local function shown(ds)
      return vim.inspect(vim.tbl_map(function(d)
        return { d.lnum, d.end_lnum, d.severity, d.code, d.message }
      end, ds))
    end
    vim.cmd('AgentReview staged')
    record('staged: the review ends', run_finished(15000))
    record('staged: nothing to review', finished ~= nil and finished.status == 'done'
      and (finished.answer or ''):find('nothing to review', 1, true) ~= nil, vim.inspect(finished))
    record('staged: no review diagnostics', #reviewed() == 0, shown(reviewed()))
    finished = nil
    vim.cmd('AgentReview')
    record('the review ends', run_finished(30000))
    local review = finished and finished.review
    record('the verdict is incorrect', type(review) == 'table' and review.verdict == 'incorrect',
      vim.inspect(finished))
    record('the review changed no file', finished ~= nil and #(finished.files_changed or {}) == 0,
      vim.inspect(finished and finished.files_changed))
    local ds
    local placed = vim.wait(10000, function()
      ds = reviewed()
      return #ds == 2
    end, 20)
    table.sort(ds or {}, function(a, b) return a.lnum < b.lnum end)
    record('two review diagnostics in calc.py', placed, shown(ds or {}))
    if not placed then return end
    local p1, p3 = ds[1], ds[2]
    record('the P1 is an error on line 5', p1.lnum == 4 and p1.col == 0
      and p1.severity == vim.diagnostic.severity.ERROR and p1.code == 'P1'
      and p1.message:find('add subtracts', 1, true) ~= nil, shown({ p1 }))
    record('the P3 is information on line 9', p3.lnum == 8
      and p3.severity == vim.diagnostic.severity.INFO and p3.code == 'P3', shown({ p3 }))
    -- The user edits line 5: its finding goes, the one on line 9 stays where it is.
    vim.api.nvim_buf_set_lines(buf, 4, 5, false, { '    return a + b' })
    local left
    record('editing line 5 drops its finding, line 9 keeps its own', vim.wait(10000, function()
      left = reviewed()
      return #left == 1 and left[1].lnum == 8
    end, 20), shown(left or {}))
    -- `base REV` reaches the server as the base: one that does not exist is said, by name.
    finished = nil
    vim.cmd('AgentReview base no-such-branch')
    record('base: the review ends', run_finished(15000))
    record('base: a base that does not exist is named', finished ~= nil and finished.status ~= 'done'
      and (finished.answer or ''):find('no-such-branch', 1, true) ~= nil, vim.inspect(finished))
    return
  end

  if scenario == 'runview' then
    -- A two-iteration run in :AgentRuns: its steps in order, and undo of the first from there.
    vim.cmd('AgentFix')
    vim.cmd('AgentRuns')
    local view = vim.api.nvim_get_current_buf()
    record('run finished', run_finished())
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    local text
    local shown = vim.wait(5000, function()
      text = table.concat(vim.api.nvim_buf_get_lines(view, 0, -1, false), '\n')
      return text:find('[done]', 1, true) ~= nil
    end, 20)
    record('the view shows the finished run', shown, text)
    local i1 = text:find('iteration 1', 1, true)
    local i2 = text:find('iteration 2', 1, true)
    record('iterations in order', i1 ~= nil and i2 ~= nil and i1 < i2, text)
    record('steps, tests and reflection shown', text:find('change to calc.py  [step', 1, true) ~= nil
      and text:find('tests passed', 1, true) ~= nil and text:find('reflection: add still subtracts', 1, true) ~= nil, text)
    record('tokens shown', text:match('iteration 1[^\n]*· [1-9]%d* tokens') ~= nil, text)
    -- <CR> on the first change opens its diff.
    local first
    for n, line in ipairs(vim.api.nvim_buf_get_lines(view, 0, -1, false)) do
      if not first and line:find('change to calc.py', 1, true) then first = n end
    end
    vim.api.nvim_win_set_cursor(0, { first, 0 })
    vim.cmd('normal \r')
    local diff = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
    record('<CR> opens the diff', vim.bo.filetype == 'diff' and diff:find('The product', 1, true) ~= nil, diff)
    vim.cmd('close')
    vim.api.nvim_set_current_win(vim.fn.bufwinid(view))
    vim.api.nvim_win_set_cursor(0, { first, 0 })
    vim.cmd('normal u')
    local undone = vim.wait(10000, function()
      local l = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
      return l:find('The product', 1, true) == nil and l:find('return a + b', 1, true) ~= nil
    end, 20)
    record('u undoes the first step, the fix stays', undone,
      table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n'))
    record('the view marks it undone', vim.wait(5000, function()
      return vim.api.nvim_buf_get_lines(view, first - 1, first, false)[1]:find('[undone]', 1, true) ~= nil
    end, 20), vim.api.nvim_buf_get_lines(view, first - 1, first, false)[1])
    local disk = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
    record('disk follows', disk:find('The product', 1, true) == nil and disk:find('return a + b', 1, true) ~= nil, disk)
    return
  end

  if scenario == 'rewind' then
    -- A two-iteration run (step 1 documents multiply, step 2 fixes add), then :AgentRewind 1
    -- with another instruction: the buffer goes back to step 1 and the new run's change lands.
    vim.cmd('AgentFix')
    record('run finished', run_finished())
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    local first_run = finished and finished.run_id
    finished = nil
    -- Each run reads its script afresh: the rewound run's coder answers this.
    vim.fn.writefile({ vim.json.encode({ role = 'coder',
      content = 'calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return b + a\n>>>>>>> REPLACE\n' }) },
      ws .. '/.replay.jsonl')
    local rewound
    vim.api.nvim_create_autocmd('User', {
      pattern = 'AgentRewindDone',
      callback = function(ev) rewound = ev.data end,
    })
    vim.cmd('AgentRewind 1 instead, fix add so it returns b + a')
    record('the rewind answers', vim.wait(10000, function() return rewound ~= nil end, 20),
      vim.inspect(rewound))
    record('it undid step 2 of the first run', rewound ~= nil and rewound.rewound.run_id == first_run
      and vim.deep_equal(rewound.rewound.undone, { 2 }), vim.inspect(rewound))
    record('the new run finished', run_finished())
    record('new run done', finished ~= nil and finished.status == 'done'
      and rewound ~= nil and finished.run_id == rewound.run_id, vim.inspect(finished))
    local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    record('the buffer keeps step 1 and has the new change', text:find('The product', 1, true) ~= nil
      and text:find('return b + a', 1, true) ~= nil and text:find('return a + b', 1, true) == nil, text)
    local disk = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
    record('disk follows', disk == text, disk)
    return
  end

  if scenario == 'runs_memory' then
    -- The run view folds a run's `memory` event (records remembered from earlier runs) into
    -- a line under the run, grouped by the run each record came from.
    local runs = agent.runs
    local used = {
      { id = 'run_a-2', run_id = 'run_a', score = 0.03, bytes = 200 },
      { id = 'run_b-1', run_id = 'run_b', score = 0.02, bytes = 180 },
      { id = 'run_a-1', run_id = 'run_a', score = 0.01, bytes = 150 },
    }
    runs.add({ runId = 'run_m', iteration = 0, role = 'agent', type = 'intent', data = { goal = 'fix the failing tests' } })
    runs.add({ runId = 'run_m', iteration = 0, role = 'agent', type = 'memory', data = { query = 'q', used = {} } })
    record('a search that found nothing says nothing', runs.remembered_line(runs.current()) == nil)
    runs.add({ runId = 'run_m', iteration = 0, role = 'agent', type = 'memory', data = { query = 'q', used = used } })
    local want = 'remembered from run run_a (run_a-2, run_a-1), run run_b (run_b-1)'
    record('the run remembers where its records came from', runs.remembered_line(runs.current()) == want,
      tostring(runs.remembered_line(runs.current())))
    vim.cmd('AgentRuns')
    local shown = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
    record(':AgentRuns shows it under the run', shown:find('  ' .. want, 1, true) ~= nil, shown)
    return
  end

  if scenario == 'tester' then
    -- "Agent: write a failing test for this" on add's lines: the tester's test is kept once it
    -- fails for its reason, Neovim creates its file as it applies the step, the fix follows as
    -- a step of its own, and undoing the test's step deletes the file and keeps the fix.
    local params = {
      textDocument = vim.lsp.util.make_text_document_params(buf),
      range = { start = { line = 3, character = 0 }, ['end'] = { line = 4, character = 16 } },
      context = { diagnostics = {} },
    }
    local responses = vim.lsp.buf_request_sync(buf, 'textDocument/codeAction', params, 5000)
    local action
    for _, r in pairs(responses or {}) do
      for _, a in ipairs(r.result or {}) do
        if a.title == 'Agent: write a failing test for this' then action = a end
      end
    end
    record('the failing-test action is offered on the selection', action ~= nil)
    client:exec_cmd(action.command, { bufnr = buf })
    record('run finished', run_finished())
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    record('the test was kept', finished ~= nil and finished.tester ~= nil
      and finished.tester.status == 'kept', vim.inspect(finished and finished.tester))
    local test_file = ws .. '/test_add.py'
    local disk = vim.fn.filereadable(test_file) == 1 and table.concat(vim.fn.readfile(test_file), '\n') or ''
    record('the test file is created on disk', disk:find('def test_add_sums', 1, true) ~= nil, disk)
    record('calc.py is fixed in its buffer', table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
      :find('return a + b', 1, true) ~= nil)
    local r = client:request_sync('workspace/executeCommand', { command = 'agent-ls.status', arguments = {} }, 2000, buf)
    local steps = r and r.result and r.result.steps or {}
    local test_step
    for _, st in ipairs(steps) do
      if vim.deep_equal(st.files, { 'test_add.py' }) then test_step = st.id end
    end
    record('the test is a step of its own', #steps == 2 and test_step ~= nil, vim.inspect(steps))
    vim.cmd('AgentUndo ' .. tostring(test_step))
    record('undoing its step deletes the test file', vim.wait(10000, function()
      return vim.fn.filereadable(test_file) == 0 and vim.fn.bufnr(test_file) == -1
    end, 20), tostring(vim.fn.bufnr(test_file)))
    record('the fix stays', table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
      :find('return a + b', 1, true) ~= nil)
    return
  end

  if scenario == 'diagnostics' then
    -- basedpyright, a second language server on the buffer: its diagnostics are forwarded to
    -- agent-ls, whose run sends the bad edit's undefined name back to the model.
    local published = false
    vim.lsp.start({
      name = 'basedpyright',
      cmd = { os.getenv('BASEDPYRIGHT'), '--stdio' },
      root_dir = ws,
      handlers = {
        ['textDocument/publishDiagnostics'] = function(err, params, ctx)
          if vim.uri_to_fname(params.uri) == vim.api.nvim_buf_get_name(buf) then published = true end
          return vim.lsp.diagnostic.on_publish_diagnostics(err, params, ctx)
        end,
      },
    }, { bufnr = buf })
    record('basedpyright reports on calc.py', vim.wait(60000, function() return published end, 50))
    vim.cmd('AgentFix')
    record('run finished', run_finished(150000))
    record('status done', finished ~= nil and finished.status == 'done', finished and finished.answer)
    local journal = vim.fn.glob(ws .. '/.agent-ls/runs/*.jsonl', false, true)[1]
    local lines = vim.tbl_map(vim.json.decode, vim.tbl_filter(function(l) return l ~= '' end,
      journal and vim.fn.readfile(journal) or {}))
    local checks = vim.tbl_filter(function(l) return l.type == 'diagnostics' and not l.data.before_edit end, lines)
    local first = checks[1] and checks[1].data.errors or {}
    record("the bad edit came back with basedpyright's error", #checks >= 2 and #first == 1
      and first[1]:find('^calc.py:5:') ~= nil and first[1]:find('"c" is not defined', 1, true) ~= nil,
      vim.inspect(checks))
    record('the fixing edit has no new error', checks[#checks] ~= nil and #checks[#checks].data.errors == 0,
      vim.inspect(checks[#checks]))
    local order = {}
    for _, l in ipairs(lines) do
      if l.type == 'test_result' or l.type == 'diagnostics' then table.insert(order, l.type) end
    end
    local at = vim.fn.index(order, 'diagnostics') + 1
    record('no test ran between the bad edit and its fix', order[at + 1] == 'diagnostics', vim.inspect(order))
    record('calc.py holds the fix', table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n'):find('return a + b', 1, true) ~= nil)
    record('agent-ls started no language server of its own', vim.fn.filereadable(ws .. '/spawned') == 0)
    return
  end

  -- The source action, as the code-action menu would offer it.
  local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
  params.context = { diagnostics = {}, only = { 'source.agent-ls.fixTests' } }
  local responses = vim.lsp.buf_request_sync(buf, 'textDocument/codeAction', params, 5000)
  local action
  for _, r in pairs(responses or {}) do
    for _, a in ipairs(r.result or {}) do
      if a.title == 'Agent: fix failing tests' then action = a end
    end
  end
  record('code action offered', action ~= nil)
  client:exec_cmd(action.command, { bufnr = buf })
  local done = run_finished()
  record('run finished', done)
  local disk = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
  local lines = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
  local test_buf = vim.fn.bufadd(ws .. '/test_calc.py')
  if scenario == 'reject' then
    record('status failed', finished.status == 'failed', finished.answer)
    record('buffer unchanged', lines:find('return a - b', 1, true) ~= nil, lines)
    record('disk unchanged', disk:find('return a - b', 1, true) ~= nil, disk)
    -- The baseline run's failures are still shown.
    record('failures shown', #vim.diagnostic.get(test_buf) > 0, vim.inspect(vim.tbl_map(function(d) return { vim.api.nvim_buf_get_name(d.bufnr), d.lnum, d.message } end, vim.diagnostic.get())))
  else
    record('status done', finished.status == 'done', finished.answer)
    record('buffer fixed', lines:find('return a + b', 1, true) ~= nil, lines)
    record('disk fixed', disk:find('return a + b', 1, true) ~= nil, disk)
    -- The plugin saved the buffer the server asked for: Neovim itself wrote the file, so it
    -- knows the file's time and a :w raises no "changed since reading it" question.
    record('buffer saved by the plugin', not vim.bo[buf].modified)
    local changed_outside = false
    local watch = vim.api.nvim_create_autocmd('FileChangedShell', {
      callback = function()
        changed_outside = true
        vim.v.fcs_choice = ''
      end,
    })
    vim.cmd('checktime')
    record('Neovim sees no change under the buffer', not changed_outside)
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { '# typed by the user' })
    local wrote, werr = false, 'not tried: the file changed under the buffer'
    if not changed_outside then
      wrote, werr = pcall(vim.cmd, 'silent write')
    end
    vim.api.nvim_del_autocmd(watch)
    local typed = table.concat(vim.fn.readfile(ws .. '/calc.py'), '\n')
    record(':w writes without a prompt', wrote and not vim.bo[buf].modified
      and typed:find('# typed by the user', 1, true) ~= nil, tostring(werr))
    record('tests passed', finished.tests.failed == 0 and finished.tests.passed == 3, vim.inspect(finished.tests))
    record('diagnostics cleared', vim.wait(5000, function() return #vim.diagnostic.get(test_buf) == 0 end, 20))
    record('statusline', agent.statusline():find('passed', 1, true) ~= nil, agent.statusline())
    -- :AgentUndo puts the buffer back through an edit Neovim applies.
    vim.cmd('AgentUndo')
    local undone = vim.wait(5000, function()
      return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n'):find('return a - b', 1, true) ~= nil
    end, 20)
    record('undo', undone)
    -- The undo is done once the server has moved the step to the redo list.
    local settled = vim.wait(5000, function()
      local r = client:request_sync('workspace/executeCommand', { command = 'agent-ls.status', arguments = {} }, 2000, buf)
      local steps = r and r.result and r.result.steps
      return steps ~= nil and steps[1] ~= nil and steps[1].undone == true
    end, 50)
    record('undo recorded', settled)
    vim.cmd('AgentRedo')
    local redone = vim.wait(5000, function()
      return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n'):find('return a + b', 1, true) ~= nil
    end, 20)
    record('redo', redone)
  end
end)
if not ok then record('script error', false, tostring(err)) end
finish()
