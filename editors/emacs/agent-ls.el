;;; agent-ls.el --- agent-ls, a coding agent in a language server, for eglot  -*- lexical-binding: t; -*-

;; Version: 0.1
;; Package-Requires: ((emacs "28.1") (eglot "1.9"))
;; Keywords: tools, languages

;;; Commentary:

;; An eglot add-on for agent-ls (`agent-ls serve').  It
;; - starts agent-ls through eglot as its own server class (`agent-ls-server'),
;; - saves the buffers an accepted agent edit changed when the server asks
;;   (`agent-ls/saveFiles'), so the disk the tests run on matches the buffers and Emacs
;;   never asks "changed on disk" on the next undo or save,
;; - asks one question per change: the server's review question (Accept, Reject, Show diff,
;;   with the diff in a `diff-mode' buffer), and applies the accepted edit without eglot's own
;;   second confirmation,
;; - forwards flymake's diagnostics, but for agent-ls's own, as `agent-ls/editorDiagnostics',
;;   so a run checks its edits with them and starts no language server of its own,
;; - shows the server's inline completion as ghost text after point while typing
;;   (`agent-ls-inline-completion'; TAB or C-c C-a takes it, C-<right> its next word),
;; - shows the run and the tests in the mode line (from `agent-ls/runEvent',
;;   `agent-ls/testStatus' and `agent-ls/runFinished'),
;; - and has commands: `agent-ls-fix', `agent-ls-run', `agent-ls-undo', `agent-ls-redo',
;;   `agent-ls-rewind',
;;   `agent-ls-rerun', `agent-ls-cancel', `agent-ls-status', `agent-ls-runs',
;;   `agent-ls-accept' and `agent-ls-reject'.
;;
;; Use:
;;   (require 'agent-ls)
;;   (agent-ls-setup)                 ; registers agent-ls with eglot for `agent-ls-modes'
;;   M-x eglot in a project file, then M-x agent-ls-fix.
;; The protocol is described in docs/lsp-extensions.md of agent-ls.

;;; Code:

(require 'cl-lib)
(require 'eglot)
(require 'jsonrpc)

(defgroup agent-ls nil
  "The agent-ls coding agent through eglot."
  :group 'tools)

(defcustom agent-ls-command '("agent-ls" "serve")
  "How to start the server."
  :type '(repeat string))

(defcustom agent-ls-modes '(python-mode rust-mode go-mode js-mode typescript-mode)
  "Major modes whose buffers `agent-ls-setup' hands to agent-ls."
  :type '(repeat symbol))

(defcustom agent-ls-settings '(:agent (:approval "prompt"))
  "Sent as initializationOptions: any key of the server's configuration.
A plist.  The default asks the server to put its review question (Accept,
Reject, Show diff) before each change; the edit that follows is applied
without eglot's own confirmation, so each change gets one question."
  :type 'sexp)

(defcustom agent-ls-ask-function #'agent-ls-ask-with-completing-read
  "Asks the server's questions.
Called with the MESSAGE and the list of button TITLES; returns the chosen
title, or nil to dismiss."
  :type 'function)

(defcustom agent-ls-forward-diagnostics t
  "Whether flymake's diagnostics are forwarded to agent-ls.
Those of every flymake backend but agent-ls's own (eglot manages one server
per buffer, so a second checker is a flymake backend), so a run checks its
edits with them and starts no language server of its own."
  :type 'boolean)

(defclass agent-ls-server (eglot-lsp-server) ()
  :documentation "An eglot connection to agent-ls.")

;;; State shown in the mode line.

(defvar agent-ls--run nil
  "The run going on: a plist (:id :goal :iteration :role :type), or nil.")
(defvar agent-ls--tests nil
  "The latest `agent-ls/testStatus' params.")
(defvar agent-ls--last-run nil
  "The latest `agent-ls/runFinished' params.")
(defvar agent-ls--events nil
  "The run events received, newest first (for `agent-ls-runs').")
(defvar agent-ls-run-finished-hook nil
  "Run with the `agent-ls/runFinished' params (a plist) when a run ends.")

(defun agent-ls--one-line (text)
  "TEXT's first line, cut at 60 characters."
  (let ((line (car (split-string (or text "") "\n"))))
    (if (> (length line) 60) (concat (substring line 0 59) "…") line)))

(defun agent-ls-mode-line ()
  "The mode line's agent-ls part: the run going on, else the last tests."
  (cond
   (agent-ls--run
    (format " [agent: %s%s]"
            (agent-ls--one-line (plist-get agent-ls--run :goal))
            (let ((i (plist-get agent-ls--run :iteration))
                  (what (plist-get agent-ls--run :type)))
              (concat (if (and i (> i 0)) (format " #%d" i) "")
                      (if what (format " %s" what) "")))))
   (agent-ls--tests
    (let ((state (plist-get agent-ls--tests :state)))
      (if (member state '("passed" "failed"))
          (format " [tests: %s %d/%d]" state
                  (or (plist-get agent-ls--tests :passed) 0)
                  (+ (or (plist-get agent-ls--tests :passed) 0)
                     (or (plist-get agent-ls--tests :failed) 0)))
        (format " [tests: %s]" state))))
   (t "")))

(defvar agent-ls--mode-line-entry '(:eval (agent-ls-mode-line)))

(defun agent-ls--redisplay ()
  (force-mode-line-update t))

;;; Starting.

(cl-defmethod eglot-initialization-options ((_server agent-ls-server))
  "The user's settings for the server."
  agent-ls-settings)

(cl-defmethod eglot-client-capabilities :around ((_server agent-ls-server))
  "Eglot's capabilities plus ours: this client answers `agent-ls/saveFiles'
and forwards flymake's diagnostics (`agent-ls/editorDiagnostics')."
  (let ((caps (cl-call-next-method)))
    (plist-put caps :experimental
               `(:agentLs (:saveFiles t :forwardsDiagnostics
                                      ,(if agent-ls-forward-diagnostics t :json-false))))))

;;;###autoload
(defun agent-ls-setup ()
  "Registers agent-ls with eglot for `agent-ls-modes'; adds the mode line part."
  (setf (alist-get agent-ls-modes eglot-server-programs nil nil #'equal)
        (cons 'agent-ls-server agent-ls-command))
  (unless (member agent-ls--mode-line-entry mode-line-misc-info)
    (push agent-ls--mode-line-entry mode-line-misc-info)))

(defun agent-ls--server ()
  "The agent-ls server of the current buffer's project."
  (let ((server (or (ignore-errors (eglot-current-server))
                    (cl-loop for servers being the hash-values of eglot--servers-by-project
                             thereis (cl-find-if #'agent-ls-server-p servers)))))
    (unless (agent-ls-server-p server)
      (user-error "agent-ls is not running here (M-x eglot)"))
    server))

;;; Requests from the server.

(defun agent-ls--save (file)
  "Saves FILE (a plist :uri :version) if its buffer is still at :version.
Returns t when the file on disk holds the buffer."
  (let* ((path (eglot--uri-to-path (plist-get file :uri)))
         (buf (find-buffer-visiting path))
         (version (plist-get file :version)))
    (when buf
      (with-current-buffer buf
        ;; Only at the version the server saw: typing that came after is never saved
        ;; behind the user's back.
        (when (or (null version) (equal version eglot--versioned-identifier))
          (if (not (buffer-modified-p))
              t
            ;; No before-save hooks: a format-on-save would rewrite the accepted change,
            ;; which undo checks against.  after-save-hook stays (eglot's didSave).
            (let ((before-save-hook nil)
                  (write-file-functions nil)
                  (inhibit-message t))
              (condition-case nil
                  (progn (basic-save-buffer) (not (buffer-modified-p)))
                (error nil)))))))))

(cl-defmethod eglot-handle-request
  ((_server agent-ls-server) (_method (eql agent-ls/saveFiles)) &key files)
  "Saves the buffers an accepted agent edit changed, so disk and buffers agree."
  (let (saved)
    (mapc (lambda (f) (when (agent-ls--save f) (push (plist-get f :uri) saved)))
          files)
    (list :saved (vconcat (nreverse saved)))))

(cl-defmethod eglot-handle-request
  ((_server agent-ls-server) (_method (eql workspace/applyEdit)) &key _label edit)
  "Applies an agent EDIT the user already accepted in the server's question.
Files not visited yet are visited first, so eglot applies the edit without
asking again."
  (let ((changes (plist-get edit :documentChanges)))
    (mapc (lambda (c)
            (let ((doc (plist-get c :textDocument)))
              (when doc (find-file-noselect (eglot--uri-to-path (plist-get doc :uri))))))
          changes))
  (eglot--apply-workspace-edit edit nil)
  ;; The didChange goes out now rather than after eglot's idle delay, so the server sees
  ;; the change land at once.
  (dolist (c (append (plist-get edit :documentChanges) nil))
    (let* ((doc (plist-get c :textDocument))
           (buf (and doc (find-buffer-visiting
                          (eglot--uri-to-path (plist-get doc :uri))))))
      (when buf
        (with-current-buffer buf (eglot--signal-textDocument/didChange)))))
  '(:applied t))

(defun agent-ls-ask-with-completing-read (message titles)
  "Asks MESSAGE with the button TITLES in the minibuffer."
  (completing-read (concat message "\n") titles nil t nil nil (car titles)))

(cl-defmethod eglot-handle-request
  ((_server agent-ls-server) (_method (eql window/showMessageRequest))
   &key _type message actions)
  "Asks MESSAGE with the ACTIONS as answers.
The review question before a change (Accept, Reject, Show diff) comes here."
  (let* ((titles (mapcar (lambda (a) (plist-get a :title)) (append actions nil)))
         (answer (funcall agent-ls-ask-function message titles)))
    (if answer (list :title answer) nil)))

(defun agent-ls--show (name text mode)
  "Shows TEXT in buffer NAME in MODE."
  (with-current-buffer (get-buffer-create name)
    (let ((inhibit-read-only t))
      (erase-buffer)
      (insert text)
      (goto-char (point-min))
      (funcall mode)
      (setq buffer-read-only t))
    (display-buffer (current-buffer))
    (current-buffer)))

(cl-defmethod eglot-handle-notification
  ((_server agent-ls-server) (_method (eql window/showMessage)) &key type message)
  "Shows MESSAGE of TYPE.
A diff (the answer to Show diff) or a long answer opens in a buffer; others
go to the echo area."
  (cond
   ((or (string-prefix-p "--- " message) (string-match-p "\n@@ " message))
    (agent-ls--show "*agent-ls diff*" message #'diff-mode))
   ((and (/= type 1) (or (> (cl-count ?\n message) 3) (> (length message) 400)))
    (agent-ls--show "*agent-ls answer*"
                    (replace-regexp-in-string "\\`agent-ls: " "" message)
                    (if (fboundp 'markdown-mode) 'markdown-mode 'text-mode)))
   (t (message "%s" message))))

(cl-defmethod eglot-handle-notification
  ((_server agent-ls-server) (_method (eql agent-ls/runEvent)) &rest event)
  "One thing that happened in a run: the mode line follows it.
An undo, a redo or the answer to a review question is said with the step's
run id after that run ended: it starts no run, and the mode line stays on
the tests."
  (push event agent-ls--events)
  (let ((type (plist-get event :type))
        (data (plist-get event :data)))
    (unless (member type '("undo" "redo" "decision" "finished"))
      (setq agent-ls--run
            (list :id (plist-get event :runId)
                  :goal (or (and (member type '("intent" "resumed")) (plist-get data :goal))
                            (plist-get agent-ls--run :goal))
                  :iteration (plist-get event :iteration)
                  :type (unless (equal type "token") type))))
    (unless (equal type "token") (agent-ls--redisplay))))

(cl-defmethod eglot-handle-notification
  ((_server agent-ls-server) (_method (eql agent-ls/testStatus)) &rest status)
  "A test run started or ended."
  (setq agent-ls--tests status)
  (agent-ls--redisplay))

(cl-defmethod eglot-handle-notification
  ((_server agent-ls-server) (_method (eql agent-ls/runFinished)) &rest outcome)
  "A run ended: the mode line goes idle and `agent-ls-run-finished-hook' runs."
  (setq agent-ls--run nil agent-ls--last-run outcome)
  (agent-ls--redisplay)
  (message "agent-ls: %s" (agent-ls--one-line (plist-get outcome :answer)))
  (run-hook-with-args 'agent-ls-run-finished-hook outcome))

;;; Commands.

(defun agent-ls--exec (command arguments &optional on-result)
  "Runs the server's COMMAND with ARGUMENTS (a vector).
ON-RESULT gets the answer."
  (jsonrpc-async-request
   (agent-ls--server) :workspace/executeCommand
   (list :command command :arguments arguments)
   :success-fn (lambda (result) (when on-result (funcall on-result result)))
   :error-fn (lambda (err) (message "agent-ls: %s" (plist-get err :message)))))

(cl-defmethod eglot-execute-command ((server agent-ls-server) command arguments)
  "Runs COMMAND with ARGUMENTS on SERVER without waiting for the answer.
Code actions come here.  Every agent-ls command answers at once; waiting
with Emacs 28's `jsonrpc-request' can leave a server request read with the
answer (an undo's edit) unhandled."
  (jsonrpc-async-request
   server :workspace/executeCommand
   (list :command (format "%s" command) :arguments (or arguments []))
   :success-fn #'ignore
   :error-fn (lambda (err) (message "agent-ls: %s" (plist-get err :message)))))

;;;###autoload
(defun agent-ls-run (goal)
  "Starts an agent run for GOAL.
With an active region the goal carries the selection."
  (interactive "sGoal: ")
  (let ((args (list :goal goal :uri (eglot--path-to-uri (or buffer-file-name default-directory)))))
    (when (use-region-p)
      (setq args (append args
                         (list :range (list :start (eglot--pos-to-lsp-position (region-beginning))
                                            :end (eglot--pos-to-lsp-position (region-end)))))))
    (agent-ls--exec "agent-ls.run" (vector args)
                    (lambda (r)
                      (when (plist-get r :run_id)
                        (setq agent-ls--run (list :id (plist-get r :run_id) :goal goal))
                        (agent-ls--redisplay))))))

;;;###autoload
(defun agent-ls-fix ()
  "Runs the tests and has the agent fix what fails."
  (interactive)
  (agent-ls--exec "agent-ls.fixTests" []
                  (lambda (r)
                    (when (plist-get r :run_id)
                      (setq agent-ls--run (list :id (plist-get r :run_id)
                                                :goal "fix the failing tests"))
                      (agent-ls--redisplay)))))

(defun agent-ls-undo (&optional step)
  "Reverts the latest agent step (with a prefix argument, asks which STEP)."
  (interactive (list (when current-prefix-arg (read-number "Step: "))))
  (agent-ls--exec "agent-ls.undo" (if step (vector (list :step step)) [])))

(defun agent-ls-rewind (step goal)
  "Takes the run of STEP back to it, code and conversation, then works on GOAL.
The steps after STEP are undone (refused, naming the file, where it was
edited since), and a new run starts from the conversation as it stood at
STEP (docs/rewind.md)."
  (interactive (list (read-number "Rewind to step: ")
                     (read-string "Instead: ")))
  (agent-ls--exec "agent-ls.rewind" (vector (list :step step :goal goal))))

(defun agent-ls-redo ()
  "Applies the latest undone agent step again."
  (interactive)
  (agent-ls--exec "agent-ls.redo" []))

(defun agent-ls-rerun ()
  "Runs the workspace's tests now."
  (interactive)
  (agent-ls--exec "agent-ls.rerunTests" []))

(defun agent-ls-cancel ()
  "Stops the run or the test run going on."
  (interactive)
  (agent-ls--exec "agent-ls.cancel" []))

(defun agent-ls-accept ()
  "Accepts the proposal waiting for approval."
  (interactive)
  (agent-ls--exec "agent-ls.accept" []))

(defun agent-ls-reject ()
  "Rejects the proposal waiting for approval."
  (interactive)
  (agent-ls--exec "agent-ls.reject" []))

(defun agent-ls--format-status (s)
  "The text of an `agent-ls.status' answer S."
  (let ((active (plist-get s :active))
        (last (plist-get s :last)))
    (concat
     (if active (format "Running: %s (%s)\n" (agent-ls--one-line (plist-get active :goal))
                        (plist-get active :run_id))
       "No run going on.\n")
     (if last (format "Last run: %s: %s\n" (plist-get last :status)
                      (agent-ls--one-line (plist-get last :answer)))
       "")
     (if agent-ls--tests (format "Tests:%s\n" (agent-ls-mode-line)) "")
     "\nSteps (newest first; `agent-ls-undo' with a prefix takes an id):\n"
     (mapconcat (lambda (step)
                  (format "  %s %s%s: %s" (plist-get step :id) (plist-get step :run_id)
                          (if (eq (plist-get step :undone) t) " (undone)" "")
                          (mapconcat #'identity (append (plist-get step :files) nil) ", ")))
                (append (plist-get s :steps) nil) "\n")
     "\n")))

(defun agent-ls-status (&optional on-result)
  "Shows the run going on, the last run and the recent agent steps.
ON-RESULT, when given, gets the answer instead."
  (interactive)
  (agent-ls--exec "agent-ls.status" []
                  (or on-result
                      (lambda (s) (agent-ls--show "*agent-ls status*"
                                                  (agent-ls--format-status s)
                                                  #'special-mode)))))

(defun agent-ls-runs ()
  "Shows what happened in the runs of this session, oldest first."
  (interactive)
  (agent-ls--show
   "*agent-ls runs*"
   (mapconcat (lambda (e)
                (let ((data (plist-get e :data)))
                  (format "%s #%s %s %s%s" (plist-get e :runId) (plist-get e :iteration)
                          (plist-get e :role) (plist-get e :type)
                          (pcase (plist-get e :type)
                            ((or "intent" "resumed") (format ": %s" (agent-ls--one-line (plist-get data :goal))))
                            ("test_result" (format ": %s, %s passed, %s failed" (plist-get data :state)
                                                   (plist-get data :passed) (plist-get data :failed)))
                            ("step" (format ": step %s" (plist-get data :step)))
                            ("finished" (format ": %s" (plist-get data :status)))
                            (_ "")))))
              (cl-remove-if (lambda (e) (equal (plist-get e :type) "token"))
                            (reverse agent-ls--events))
              "\n")
   #'special-mode))

;;; The editor's own diagnostics, forwarded.

(defvar-local agent-ls--forwarded nil
  "The last `agent-ls/editorDiagnostics' params sent for this buffer.")

(defun agent-ls--project-server ()
  "The agent-ls server of the current buffer's project, or nil."
  (let ((project (ignore-errors (eglot--current-project))))
    (and project
         (cl-find-if #'agent-ls-server-p (gethash project eglot--servers-by-project)))))

(defun agent-ls--severity (type)
  "LSP's severity of the flymake diagnostic TYPE."
  (pcase (get type 'flymake-category)
    ('flymake-error 1)
    ('flymake-warning 2)
    (_ 3)))

(defun agent-ls--flymake-wire ()
  "The current buffer's flymake diagnostics but agent-ls's own, as LSP Diagnostics.
In a buffer eglot manages with agent-ls, eglot's backend reports agent-ls's
own diagnostics (its test and review findings): those are left out."
  (let ((ours (and (agent-ls-server-p (ignore-errors (eglot-current-server)))
                   'eglot-flymake-backend)))
    (vconcat
     (cl-loop for d in (flymake-diagnostics)
              for backend = (flymake-diagnostic-backend d)
              unless (eq backend ours)
              collect (list :range (list :start (eglot--pos-to-lsp-position (flymake-diagnostic-beg d))
                                         :end (eglot--pos-to-lsp-position (flymake-diagnostic-end d)))
                            :severity (agent-ls--severity (flymake-diagnostic-type d))
                            :message (flymake-diagnostic-text d)
                            :source (format "%s" backend))))))

(defun agent-ls--forward-diagnostics (&optional backend &rest _)
  "Sends the current buffer's flymake diagnostics to its project's agent-ls.
BACKEND is the flymake backend that just reported, if any.  With the
buffer's version as eglot sent it in didChange, so the server can tell the
diagnostics of an agent edit's text from a late word on the text before it.
An unchanged list at the same version is not sent again, nor an empty one
for a buffer only agent-ls checks (the server would wait for the editor's
word on it after each edit)."
  (when-let* ((agent-ls-forward-diagnostics)
              (file (buffer-file-name))
              (server (agent-ls--project-server)))
    (let* ((wire (agent-ls--flymake-wire))
           (ours (and (agent-ls-server-p (ignore-errors (eglot-current-server)))
                      (eq backend 'eglot-flymake-backend)))
           (params (list :uri (eglot--path-to-uri file)
                         :diagnostics wire
                         :version eglot--versioned-identifier)))
      (unless (or (equal params agent-ls--forwarded)
                  (and (= (length wire) 0) (null agent-ls--forwarded)
                       (or ours (null backend))))
        (setq agent-ls--forwarded params)
        (jsonrpc-notify server :agent-ls/editorDiagnostics params)))))

;; Flymake has no hook for a backend's report: every report is followed, in the buffer
;; it is about.
(advice-add 'flymake--handle-report :after #'agent-ls--forward-diagnostics)

(defun agent-ls--forward-all (server)
  "Once agent-ls (SERVER) is connected: every flymake buffer's diagnostics so far."
  (when (agent-ls-server-p server)
    (dolist (buffer (buffer-list))
      (with-current-buffer buffer
        (when (bound-and-true-p flymake-mode)
          (agent-ls--forward-diagnostics))))))
(add-hook 'eglot-connect-hook #'agent-ls--forward-all)

;;; Inline completion (ghost text).

(defcustom agent-ls-inline-completion t
  "Whether agent-ls's inline completions show as ghost text after point.
They come from the server's `textDocument/inlineCompletion' once it offers
them (its `completion.base_url' is set).  TAB or \\`C-c C-a' takes the whole
suggestion, \\`C-<right>' its next word, while one is shown."
  :type 'boolean)

(defcustom agent-ls-inline-completion-delay 0.3
  "Seconds of idleness after typing before a suggestion is asked for."
  :type 'number)

(defface agent-ls-inline-completion-face '((t :inherit shadow))
  "The face of the suggestion shown after point.")

(defvar-local agent-ls--ghost nil
  "The overlay showing the suggestion after point, or nil.")
(defvar-local agent-ls--ghost-item nil
  "The item shown: a plist (:insertText :command ...).")
(defvar-local agent-ls--ghost-visible nil
  "Non-nil while a suggestion is shown: the accept keys are active then.")
(defvar-local agent-ls--ghost-asked nil
  "The request in flight: a plist (:id :tick :point), or nil.")
(defvar-local agent-ls--ghost-timer nil
  "The idle timer that asks for a suggestion.")

(defvar agent-ls-inline-completion-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "TAB") #'agent-ls-accept-inline-completion)
    (define-key map (kbd "<tab>") #'agent-ls-accept-inline-completion)
    (define-key map (kbd "C-c C-a") #'agent-ls-accept-inline-completion)
    (define-key map (kbd "C-<right>") #'agent-ls-accept-inline-completion-word)
    map)
  "Keys active while a suggestion is shown.")

(add-to-list 'minor-mode-map-alist
             (cons 'agent-ls--ghost-visible agent-ls-inline-completion-map))

(defun agent-ls--ghost-hide ()
  "Takes the suggestion off the screen."
  (when agent-ls--ghost
    (delete-overlay agent-ls--ghost))
  (setq agent-ls--ghost nil
        agent-ls--ghost-item nil
        agent-ls--ghost-visible nil))

(defun agent-ls--ghost-show (item)
  "Shows ITEM's text after point, the cursor staying before it."
  (agent-ls--ghost-hide)
  (let ((text (copy-sequence (plist-get item :insertText))))
    (when (> (length text) 0)
      (add-face-text-property 0 (length text) 'agent-ls-inline-completion-face nil text)
      (put-text-property 0 1 'cursor t text)
      (setq agent-ls--ghost (make-overlay (point) (point) nil t nil)
            agent-ls--ghost-item item
            agent-ls--ghost-visible t)
      (overlay-put agent-ls--ghost 'after-string text)
      (overlay-put agent-ls--ghost 'agent-ls-ghost t))))

(defun agent-ls--ghost-item-at-point (result)
  "The first item of RESULT (an array of items, or a list) that inserts at point.
An item that replaces other text (a next-edit suggestion) is left to the code
action that offers it."
  (let ((items (if (vectorp result) result (plist-get result :items))))
    (cl-find-if
     (lambda (item)
       (let ((range (plist-get item :range)))
         (and (stringp (plist-get item :insertText))
              (or (null range)
                  (let ((region (eglot--range-region range)))
                    (and (= (car region) (point)) (= (cdr region) (point))))))))
     items)))

(defun agent-ls--ghost-request-id (server method params &rest args)
  "Sends the request; its id, for `$/cancelRequest', when jsonrpc tells it."
  (if (fboundp 'jsonrpc--async-request-1)
      (car-safe (apply #'jsonrpc--async-request-1 server method params args))
    (apply #'jsonrpc-async-request server method params args)
    nil))

(defun agent-ls-inline-completion-request ()
  "Asks agent-ls for a suggestion at point, and shows it when it comes.
The older request in flight is cancelled; an answer is shown only if the
buffer and point are as they were when it was asked."
  (interactive)
  (when-let* ((server (ignore-errors (eglot-current-server)))
              ((agent-ls-server-p server))
              ((eglot--server-capable :inlineCompletionProvider)))
    (when-let ((older (plist-get agent-ls--ghost-asked :id)))
      (jsonrpc-notify server :$/cancelRequest (list :id older)))
    ;; The server must hold the text the suggestion is asked for.
    (when eglot--recent-changes
      (eglot--signal-textDocument/didChange))
    (let* ((buf (current-buffer))
           (asked (list :tick (buffer-chars-modified-tick) :point (point)))
           (current (lambda ()
                      (and (buffer-live-p buf)
                           (with-current-buffer buf
                             (and (eq agent-ls--ghost-asked asked)
                                  (= (buffer-chars-modified-tick) (plist-get asked :tick))
                                  (= (point) (plist-get asked :point))))))))
      (setq agent-ls--ghost-asked asked)
      (let ((id (agent-ls--ghost-request-id
                 server :textDocument/inlineCompletion
                 (append (eglot--TextDocumentPositionParams) (list :context (list :triggerKind 2)))
                 :success-fn (lambda (result)
                               (when (funcall current)
                                 (with-current-buffer buf
                                   (setq agent-ls--ghost-asked nil)
                                   (let ((item (agent-ls--ghost-item-at-point result)))
                                     (when item (agent-ls--ghost-show item))))))
                 :error-fn #'ignore
                 :timeout-fn #'ignore)))
        (plist-put asked :id id)))))

(defun agent-ls--ghost-after-change (&rest _)
  "Typing takes the suggestion down and asks again once Emacs is idle."
  (agent-ls--ghost-hide)
  (when (timerp agent-ls--ghost-timer)
    (cancel-timer agent-ls--ghost-timer))
  (setq agent-ls--ghost-timer nil)
  (when agent-ls-inline-completion
    (let ((buf (current-buffer)))
      (setq agent-ls--ghost-timer
            (run-with-idle-timer agent-ls-inline-completion-delay nil
                                 (lambda ()
                                   (when (buffer-live-p buf)
                                     (with-current-buffer buf
                                       (setq agent-ls--ghost-timer nil)
                                       (agent-ls-inline-completion-request)))))))))

(defun agent-ls--ghost-post-command ()
  "Moving point off the suggestion takes it down."
  (when (and agent-ls--ghost (/= (point) (overlay-start agent-ls--ghost)))
    (agent-ls--ghost-hide)))

(defun agent-ls-accept-inline-completion ()
  "Inserts the suggestion shown and tells the server it was taken."
  (interactive)
  (when-let ((item agent-ls--ghost-item))
    (agent-ls--ghost-hide)
    (insert (plist-get item :insertText))
    (when-let ((command (plist-get item :command)))
      (agent-ls--exec (plist-get command :command) (or (plist-get command :arguments) [])))))

(defun agent-ls-accept-inline-completion-word ()
  "Inserts the suggestion's next word; the rest stays shown."
  (interactive)
  (when-let ((item agent-ls--ghost-item))
    (let* ((text (plist-get item :insertText))
           (end (if (string-match "\\W*\\w+" text) (match-end 0) (length text)))
           (rest (substring text end)))
      (agent-ls--ghost-hide)
      (insert (substring text 0 end))
      ;; The insertion asked again; the rest of this one shows meanwhile.
      (when (> (length rest) 0)
        (agent-ls--ghost-show (plist-put (copy-sequence item) :insertText rest))))))

(defun agent-ls--inline-completion-setup ()
  "In a buffer eglot manages with agent-ls: ghost text while typing.
Only when the server offers inline completion: elsewhere typing starts no timer."
  (if (and eglot--managed-mode (agent-ls-server-p (ignore-errors (eglot-current-server)))
           (eglot--server-capable :inlineCompletionProvider))
      (progn
        (add-hook 'after-change-functions #'agent-ls--ghost-after-change nil t)
        (add-hook 'post-command-hook #'agent-ls--ghost-post-command nil t))
    (remove-hook 'after-change-functions #'agent-ls--ghost-after-change t)
    (remove-hook 'post-command-hook #'agent-ls--ghost-post-command t)
    (agent-ls--ghost-hide)))
(add-hook 'eglot-managed-mode-hook #'agent-ls--inline-completion-setup)

(provide 'agent-ls)
;;; agent-ls.el ends here
