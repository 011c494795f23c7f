--- Forwards Neovim's own diagnostics (those of the other language servers attached to a buffer,
--- such as pyright, and of any other vim.diagnostic source) to agent-ls as
--- `agent-ls/editorDiagnostics`, so a run checks each edit with them and starts no language
--- server of its own (docs/project-lsp.md). agent-ls's own diagnostics (its test failures and
--- review findings) are left out.
local M = {}

--- The sources of agent-ls's own diagnostics (src/lsp/test_runs.rs, review_diagnostics.rs).
local OURS = { ['agent-ls test'] = true, ['agent-ls review'] = true }

-- Whether namespace `ns` is one Neovim made for agent-ls's own client
-- ("nvim.lsp.agent-ls.3", on 0.10 "vim.lsp.agent-ls.3", pull ones with a suffix).
local function ours(ns)
  local info = vim.diagnostic.get_namespaces()[ns]
  local name = info and info.name or ''
  return name:find('lsp%.agent%-ls%.%d') ~= nil
end

--- A buffer's diagnostics as the notification carries them (LSP's shape; Neovim's columns
--- are bytes, as the utf-8 position encoding the plugin negotiates counts them).
function M.wire(buf)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    if not ours(d.namespace) and not OURS[d.source or ''] then
      table.insert(out, {
        range = {
          start = { line = d.lnum, character = d.col },
          ['end'] = { line = d.end_lnum or d.lnum, character = d.end_col or d.col },
        },
        severity = d.severity,
        message = d.message,
        source = d.source,
        code = d.code,
      })
    end
  end
  return out
end

local function notify(c, method, params)
  if vim.fn.has('nvim-0.11') == 1 then return c:notify(method, params) end
  return c.notify(method, params)
end

--- Sends buffer `buf`'s diagnostics to the agent-ls client `c`, with the document version the
--- buffer was at (the one Neovim sends in didChange), so the server can tell diagnostics of
--- the text after an edit from a late word on the text before it.
local last = {}

-- Whether a language server besides agent-ls is attached to `buf`.
local function checked(buf)
  for _, other in ipairs(vim.lsp.get_clients({ bufnr = buf })) do
    if other.name ~= 'agent-ls' then return true end
  end
  return false
end

function M.send(c, buf)
  if not vim.api.nvim_buf_is_valid(buf) or vim.bo[buf].buftype ~= '' then return end
  local name = vim.api.nvim_buf_get_name(buf)
  if name == '' then return end
  local wire = M.wire(buf)
  -- An empty list for a buffer nothing but agent-ls checks (its own test findings changed)
  -- is not sent: the server would wait for the editor's word on that file after each edit.
  if #wire == 0 and last[buf] == nil and not checked(buf) then return end
  local params = {
    uri = vim.uri_from_fname(name),
    diagnostics = wire,
    version = rawget(vim.lsp.util.buf_versions or {}, buf),
  }
  -- A change of agent-ls's own diagnostics fires DiagnosticChanged too: the others' list, the
  -- same at the same version, is not sent again (the server would read it as news).
  local key = c.id .. vim.json.encode(params)
  if last[buf] == key then return end
  last[buf] = key
  notify(c, 'agent-ls/editorDiagnostics', params)
end

--- Starts forwarding: every buffer's diagnostics now, then a buffer's whenever they change.
--- `client` gives the running agent-ls client (or nil).
function M.forward(group, client)
  vim.api.nvim_create_autocmd('DiagnosticChanged', {
    group = group,
    callback = function(ev)
      local c = client()
      if c then M.send(c, ev.buf) end
    end,
  })
  vim.api.nvim_create_autocmd('LspAttach', {
    group = group,
    callback = function(ev)
      local c = vim.lsp.get_client_by_id(ev.data.client_id)
      if not c or c.name ~= 'agent-ls' then return end
      for _, buf in ipairs(vim.api.nvim_list_bufs()) do
        if vim.api.nvim_buf_is_loaded(buf) and #M.wire(buf) > 0 then M.send(c, buf) end
      end
    end,
  })
end

return M
