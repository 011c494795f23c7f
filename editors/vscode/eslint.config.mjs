// The extension's lint: ESLint's and typescript-eslint's recommended rules.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['out/', 'node_modules/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // The end-to-end script runs under Node, outside VS Code.
    files: ['test/**/*.mjs'],
    languageOptions: {
      globals: { process: 'readonly', console: 'readonly', setTimeout: 'readonly', fetch: 'readonly' },
    },
  },
  {
    rules: {
      // Every promise is either awaited or deliberately left to VS Code (withProgress).
      eqeqeq: 'error',
    },
  },
);
