;;; emacs_completion.el --- Ghost text in a real headless Emacs with eglot  -*- lexical-binding: t; -*-
;;; Commentary:
;; agent-ls.el's inline completion under eglot 1.9 against the real agent-ls and a stub FIM
;; model (STUB_URL): typing (keys through `execute-kbd-macro', so the command loop's hooks
;; run) asks for a suggestion once idle, which shows as an overlay after point; C-<right>
;; takes a word, TAB the rest, and the acceptance reaches the server.  SCENARIO "stale": the
;; stub holds its answer to the first keystroke while the user types on, and that answer
;; must never show.  Results go to $RESULT as JSON lines.
;;; Code:

(require 'json)
(dolist (dir (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/*"))
  (add-to-list 'load-path dir))
(require 'cl-lib)
(setq make-backup-files nil
      create-lockfiles nil
      auto-save-default nil
      eglot-send-changes-idle-time 0.1
      eglot-sync-connect t)

(defvar ec-ws (getenv "WORKSPACE"))
(defvar ec-scenario (getenv "SCENARIO"))
(defvar ec-stale-seen nil "The held answer's text, if it ever showed.")

(defun ec-record (name ok &optional detail)
  (with-temp-buffer
    (insert (json-encode `((name . ,name) (ok . ,(if ok t :json-false))
                           (detail . ,(format "%s" (or detail ""))))) "\n")
    (append-to-file (point-min) (point-max) (getenv "RESULT"))))

(defun ec-ghost (buf)
  "The suggestion shown in BUF, or nil."
  (with-current-buffer buf
    (cl-loop for o in (overlays-in (point-min) (point-max))
             when (overlay-get o 'agent-ls-ghost)
             return (substring-no-properties (overlay-get o 'after-string)))))

(defun ec-wait (buf pred &optional seconds)
  "Runs the process loop until PRED holds or SECONDS pass; PRED's last value.
A batch Emacs is never idle: eglot's pending didChange and agent-ls.el's
idle request are run here, as an idle interactive Emacs would."
  (let ((deadline (+ (float-time) (or seconds 20))) value)
    (while (and (not (setq value (funcall pred))) (< (float-time) deadline))
      (accept-process-output nil 0.05)
      (with-current-buffer buf
        (when eglot--recent-changes
          (eglot--signal-textDocument/didChange))
        ;; `timer-event-handler' takes the timer off the idle list and runs it.
        (when (timerp agent-ls--ghost-timer)
          (timer-event-handler agent-ls--ghost-timer)))
      (let ((g (ec-ghost buf)))
        (when (and g (string-match-p "STALE" g))
          (setq ec-stale-seen g))))
    value))

(defun ec-line-2 (buf)
  (with-current-buffer buf
    (save-excursion
      (goto-char (point-min))
      (forward-line 1)
      (buffer-substring-no-properties (line-beginning-position) (line-end-position)))))

(defun ec-journal ()
  (let ((f (concat ec-ws "/.agent-ls/completions.jsonl")))
    (if (file-exists-p f)
        (with-temp-buffer (insert-file-contents f) (buffer-string))
      "")))

(defun ec-type (keys)
  (execute-kbd-macro (kbd keys)))

(defun ec-run ()
  (add-to-list 'load-path (getenv "PLUGIN"))
  (require 'agent-ls)
  (setq agent-ls-command (list (getenv "AGENT_LS") "serve")
        agent-ls-settings `(:completion (:provider "openai" :base_url ,(getenv "STUB_URL")
                                                    :model "fim" :timeout_ms 5000)))
  (agent-ls-setup)
  (let ((buf (find-file-noselect (concat ec-ws "/main.py"))))
    (switch-to-buffer buf)
    (python-mode)
    (eglot '(python-mode) (eglot--current-project) 'agent-ls-server
           (list (getenv "AGENT_LS") "serve") "python")
    (ec-record "eglot manages main.py with agent-ls"
               (ec-wait buf (lambda () (and eglot--managed-mode (eglot-current-server)))))
    (ec-record "the server offers inline completion"
               (eglot--server-capable :inlineCompletionProvider))
    (goto-char (point-min))
    (forward-line 1)
    (end-of-line)
    (ec-type "r")
    (if (equal ec-scenario "stale")
        (progn
          (ec-record "the first keystroke's request reaches the model, which holds it"
                     (ec-wait buf (lambda () (file-exists-p (concat ec-ws "/.stub-1")))))
          (ec-type "e")
          (ec-record "the suggestion for what was typed since shows after point"
                     (ec-wait buf (lambda () (equal (ec-ghost buf) "turn a + b")))
                     (ec-ghost buf))
          (ec-wait buf (lambda () (file-exists-p (concat ec-ws "/.stub-done-1"))))
          (let ((until (+ (float-time) 1.0)))
            (ec-wait buf (lambda () (> (float-time) until))))
          (ec-record "the answer that came after the user typed on is never shown"
                     (not ec-stale-seen) ec-stale-seen))
      (ec-record "the suggestion shows as an overlay after point"
                 (ec-wait buf (lambda () (equal (ec-ghost buf) "eturn a + b")))
                 (ec-ghost buf))
      (ec-type "C-<right>")
      (ec-record "C-<right> takes the next word, the rest stays shown"
                 (and (equal (ec-line-2 buf) "    return")
                      (ec-wait buf (lambda () (equal (ec-ghost buf) " a + b"))))
                 (format "%S / %S" (ec-line-2 buf) (ec-ghost buf))))
    (ec-type "TAB")
    (ec-record "TAB accepts it into the buffer" (equal (ec-line-2 buf) "    return a + b")
               (ec-line-2 buf))
    (ec-record "the suggestion is gone" (null (ec-ghost buf)) (ec-ghost buf))
    (ec-record "the acceptance reaches the server"
               (ec-wait buf (lambda () (string-match-p "\"accepted\"" (ec-journal))))
               (ec-journal))
    (unless (equal ec-scenario "stale")
      ;; Switched off: typing asks nothing and shows nothing.
      (setq agent-ls-inline-completion nil)
      (ec-type "RET")
      (ec-type "r")
      (let ((until (+ (float-time) 1.0)))
        (ec-wait buf (lambda () (> (float-time) until))))
      (ec-record "with agent-ls-inline-completion off nothing is asked or shown"
                 (and (null agent-ls--ghost-timer) (null (ec-ghost buf)))))
    (ec-record "the held answer never showed" (not ec-stale-seen) ec-stale-seen)))

(condition-case err
    (ec-run)
  (error (ec-record "the scenario runs" nil err)))
(kill-emacs 0)
